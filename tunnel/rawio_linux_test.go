package tunnel

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"plug/tunnel/clustertest"
)

// A raw connection carries a stream both ways, more than the sockets
// buffer (so that its write finds the socket full and waits for the
// reader), passes a half-close on and reads the peer's end as io.EOF.
func TestARawConnCarriesAStreamAndItsEnd(t *testing.T) {
	a, b := clustertest.TCPPair(t)
	raw := rawIO(a)
	if _, ok := raw.(*rawConn); !ok {
		t.Fatalf("rawIO gave a %T for a TCP connection", raw)
	}
	data := randomBytes(16 << 20)
	sent := make(chan error, 1)
	go func() {
		_, err := raw.Write(data)
		if err == nil {
			err = raw.(halfCloser).CloseWrite()
		}
		sent <- err
	}()
	got, err := io.ReadAll(b)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the peer read %d bytes (%v), not the %d written", len(got), err, len(data))
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}

	go func() { b.Write(data); b.Close() }()
	got, err = io.ReadAll(raw)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes (%v), not the %d the peer wrote", len(got), err, len(data))
	}
	if n, err := raw.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("after the peer's end: %d, %v; want 0, io.EOF", n, err)
	}
	raw.Close()
}

// A raw connection's reads keep the connection's deadline, and a read
// waiting when the connection is closed ends with net.ErrClosed.
func TestARawConnKeepsDeadlinesAndClose(t *testing.T) {
	a, _ := clustertest.TCPPair(t)
	raw := rawIO(a)
	raw.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	var ne net.Error
	if _, err := raw.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("a read past the deadline: %v, want a timeout", err)
	}
	raw.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() { _, err := raw.Read(make([]byte, 1)); done <- err }()
	raw.Close() // whether the read waits by now or not, it ends
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("a read when the connection closed: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a read went on waiting after its connection was closed")
	}
	if _, err := raw.Write([]byte{1}); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a write after Close: %v, want net.ErrClosed", err)
	}
}

// A connection that is not TCP is left as it is.
func TestRawIOLeavesOtherConnectionsAlone(t *testing.T) {
	p, q := net.Pipe()
	defer q.Close()
	if got := rawIO(p); got != p {
		t.Fatalf("rawIO made a %T of a net.Pipe", got)
	}
}

// TestRawCallsAllocateNothing: a raw connection's read and write, a UDP
// socket's raw recvmsg and sendmsg, and a batch read of its datagrams
// allocate nothing: they run for
// every packet of a stream and every read of a flood.
func TestRawCallsAllocateNothing(t *testing.T) {
	a, b := clustertest.TCPPair(t)
	raw := rawIO(a)
	out, in := make([]byte, 512), make([]byte, 512)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := raw.Write(out); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(b, in); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Write(out); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(raw, in); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("a raw write and read allocated %v times", n)
	}

	rx, tx := udpPair(t)
	send, recv := datagramSender(tx, netip.AddrPort{}), newDatagramCalls(rx)
	run := [][]byte{out}
	if n := testing.AllocsPerRun(100, func() {
		if err := send(run, nil); err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := recv.recv(in, nil); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("a raw sendmsg and recvmsg allocated %v times", n)
	}
	frames, batch := framesOf(rx), make([]byte, 0, batchBytes+frameRoom)
	if n := testing.AllocsPerRun(100, func() {
		if err := send(run, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := frames.readFrames(batch, batchBytes); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("a batch read of a socket allocated %v times", n)
	}
}
