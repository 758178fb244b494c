package main

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

// TestNXDomainEndsALookup: Go's resolver asking serveNXDomain learns at
// once that the name does not exist.
func TestNXDomainEndsALookup(t *testing.T) {
	l, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.LocalAddr().String()
	l.Close()
	stop, err := serveNXDomain(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp4", addr)
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err = r.LookupIP(ctx, "ip4", "fresh-1.")
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Fatalf("lookup: %v; want not found", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the lookup took %s", took)
	}
}
