package tunnel

import (
	"io"
	"net"
	"testing"
	"time"

	"plug/tunnel/clustertest"
)

// During a probe's window, the probe is recognised by its nonce and closed;
// other callers are passed on with every byte they sent, as soon as it
// differs from the nonce, or once the window is over when they send
// nothing; outside a window callers pass untouched.
func TestScreenTellsTheProbeFromCallers(t *testing.T) {
	pp := &pathProof{}
	if c, s := clustertest.TCPPair(t); pp.screen(s) != s {
		t.Fatal("outside a window, a caller was not passed on as it is")
	} else {
		c.Close()
	}

	w := pp.open()
	probe, atListener := clustertest.TCPPair(t)
	go probe.Write(w.nonce[:])
	if pp.screen(atListener) != nil {
		t.Fatal("the probe was passed on")
	}
	select {
	case <-w.arrived:
	default:
		t.Fatal("the probe's arrival was not noted")
	}
	probe.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := probe.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the probe was not closed at the listener: %v", err)
	}

	// A caller whose first byte happens to be the nonce's, then differs.
	caller, atListener := clustertest.TCPPair(t)
	request := append([]byte{w.nonce[0]}, "GET / HTTP/1.1\r\n\r\n"...)
	if request[1] == w.nonce[1] {
		request[1]++
	}
	go caller.Write(request)
	start := time.Now()
	passed := pp.screen(atListener)
	if passed == nil {
		t.Fatal("a caller was taken for the probe")
	}
	if waited := time.Since(start); waited > time.Second {
		t.Errorf("a caller that sent its request was held %s", waited)
	}
	got := make([]byte, len(request))
	passed.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := io.ReadFull(passed, got); err != nil || string(got) != string(request) {
		t.Errorf("the caller's bytes passed on: %q, %v; sent %q", got, err, request)
	}
	if _, ok := passed.(interface{ CloseWrite() error }); !ok {
		t.Error("the passed-on caller lost its half-close")
	}

	// A caller that waits for the server to speak first is held until the
	// window is over, and loses nothing.
	w = pp.open()
	quiet, atListener := clustertest.TCPPair(t)
	defer quiet.Close()
	done := make(chan net.Conn, 1)
	go func() { done <- pp.screen(atListener) }()
	select {
	case <-w.accepted:
	case <-time.After(clustertest.Settle):
		t.Fatal("the quiet caller was not screened")
	}
	select {
	case <-done:
		t.Fatal("a quiet caller was passed on while the window was open")
	default:
	}
	pp.close(w)
	select {
	case c := <-done:
		if c != atListener {
			t.Errorf("a quiet caller came back as %T", c)
		}
	case <-time.After(clustertest.Settle):
		t.Fatal("a quiet caller was still held after the window")
	}
}
