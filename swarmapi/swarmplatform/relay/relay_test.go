package relay

import (
	"context"
	"fmt"
	"io"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"plug/tunnel/clustertest"
)

func TestArgsRoundTrip(t *testing.T) {
	routes := []Route{{Listen: ":80", To: "10.0.1.5:40001"}, {Listen: ":53", To: "10.0.1.5:40003", UDP: true}, {Listen: ":443", To: "10.0.1.5:40002"}}
	args := Args(routes)
	if args[0] != "relay" {
		t.Fatalf("args %v", args)
	}
	got, err := ParseArgs(args[1:])
	if err != nil || !reflect.DeepEqual(got, routes) {
		t.Fatalf("got %v, %v", got, err)
	}
}

func TestParseArgsRefusesBadCommandLines(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"--listen", ":80"},
		{"--to", "a:1", "--listen", ":80"},
		{"--listen", "80", "--to", "a:1"},
		{"--listen", ":80", "--to", "nohostport"},
	} {
		if _, err := ParseArgs(args); err == nil || !strings.Contains(err.Error(), "usage") {
			t.Errorf("%q: got %v, want an error with the usage", args, err)
		}
	}
}

// TestForwardCopiesBothWaysAndPassesHalfCloses sends a request, closes its
// side for writing, and expects the whole answer the upstream writes after
// seeing the end of the request.
func TestForwardCopiesBothWaysAndPassesHalfCloses(t *testing.T) {
	upstream, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer upstream.Close()
	go func() {
		for {
			c, err := upstream.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, _ := io.ReadAll(c) // until the relay passes our half-close
				io.WriteString(c, "got "+string(req))
			}()
		}
	}()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- Forward(ctx, ln, upstream.Addr().String()) }()

	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "hello")
		c.(*net.TCPConn).CloseWrite()
		answer, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(answer) != "got hello" {
			t.Fatalf("connection %d: %q, %v", i, answer, err)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Forward ended with %v", err)
		}
	case <-time.After(clustertest.Settle):
		t.Fatal("Forward did not end with its context")
	}
}

func TestForwardClosesTheCallerWhenUpstreamIsDown(t *testing.T) {
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := dead.Addr().String()
	dead.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Forward(ctx, ln, addr)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("read %d, %v; want the connection closed", n, err)
	}
}

// Two senders to a UDP route are two flows: each gets the replies to its
// own datagrams, and the upstream sees them come from two sockets.
func TestForwardDatagramsKeepsEachSendersFlow(t *testing.T) {
	upstream, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer upstream.Close()
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := upstream.ReadFromUDP(buf)
			if err != nil {
				return
			}
			upstream.WriteToUDP([]byte(fmt.Sprintf("%s from %d", buf[:n], from.Port)), from)
		}
	}()
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ForwardDatagrams(ctx, pc, upstream.LocalAddr().String()) }()

	ask := func(c net.Conn, what string) string {
		t.Helper()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte(what)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1500)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("the reply to %s: %v", what, err)
		}
		return string(buf[:n])
	}
	var fromPorts []string
	for _, who := range []string{"a", "b"} {
		c, err := net.Dial("udp", pc.LocalAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		first, second := ask(c, who+"1"), ask(c, who+"2")
		p1, ok1 := strings.CutPrefix(first, who+"1 from ")
		p2, ok2 := strings.CutPrefix(second, who+"2 from ")
		if !ok1 || !ok2 || p1 != p2 {
			t.Errorf("sender %s got %q and %q, want its own replies from one flow", who, first, second)
		}
		fromPorts = append(fromPorts, p1)
	}
	if fromPorts[0] == fromPorts[1] {
		t.Errorf("both senders reached the upstream from port %s: one flow for two senders", fromPorts[0])
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("ForwardDatagrams: %v", err)
	}
}
