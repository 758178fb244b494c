package memplatform

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"testing"

	"plug/tunnel"
)

// TestServedNameReachesItsTargetUntilReleased serves a name at a loopback
// listener, dials it, has another run refused, and releases it.
func TestServedNameReachesItsTargetUntilReleased(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		if c, err := l.Accept(); err == nil {
			io.WriteString(c, "hello")
			c.Close()
		}
	}()
	ctx := context.Background()
	p := New()
	b := tunnel.Binding{Name: "web", Port: 80, Target: l.Addr().(*net.TCPAddr).Port, Holder: tunnel.Holder{Run: "r1"}}
	if _, err := p.Serve(ctx, b); err != nil {
		t.Fatal(err)
	}
	c, err := p.DialContext(ctx, "tcp", "web:80")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(c)
	c.Close()
	if string(got) != "hello" {
		t.Fatalf("web:80 answered %q", got)
	}
	other := b
	other.Holder.Run = "r2"
	var held *tunnel.HeldError
	if _, err := p.Serve(ctx, other); !errors.As(err, &held) || held.Holder.Run != "r1" {
		t.Fatalf("another run's serve: %v", err)
	}
	if err := p.Release(ctx, other); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Held("web"); !ok {
		t.Fatal("another run's release gave web back")
	}
	if err := p.Release(ctx, b); err != nil {
		t.Fatal(err)
	}
	for _, address := range []string{"web:80", "web:" + strconv.Itoa(b.Target), "db:5432"} {
		var dnsErr *net.DNSError
		if _, err := p.DialContext(ctx, "tcp", address); !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
			t.Errorf("%s: got %v, want no such host", address, err)
		}
	}
}
