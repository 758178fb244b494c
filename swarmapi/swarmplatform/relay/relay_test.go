package relay

import (
	"context"
	"io"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"plug/tunnel/clustertest"
)

func TestArgsRoundTrip(t *testing.T) {
	routes := []Route{{":80", "10.0.1.5:40001"}, {":443", "10.0.1.5:40002"}}
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
