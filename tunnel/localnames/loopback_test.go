package localnames

import (
	"net/netip"
	"testing"
)

// TestLoopbackPoolsNeverShare: two runs walking the same addresses get
// different ones, and an address is free again once its run ended.
func TestLoopbackPoolsNeverShare(t *testing.T) {
	first, last := netip.MustParseAddr("127.126.250.1"), netip.MustParseAddr("127.126.250.4")
	a, b := rangePool(first, last), rangePool(first, last)
	seen := map[netip.Addr]string{}
	for range 2 {
		for name, p := range map[string]*Pool{"a": a, "b": b} {
			addr, err := p.Take()
			if err != nil {
				t.Fatal(err)
			}
			if other, taken := seen[addr]; taken {
				t.Fatalf("%s is handed out to runs %s and %s", addr, other, name)
			}
			seen[addr] = name
		}
	}
	if _, err := a.Take(); err != errPoolExhausted {
		t.Fatalf("a fifth address of four: %v", err)
	}
	a.Close()
	c := rangePool(first, last)
	defer c.Close()
	if addr, err := c.Take(); err != nil || seen[addr] != "a" {
		t.Fatalf("after a ended, a new run got %s (%v), want one of a's", addr, err)
	}
	b.Close()
}

func TestBlockPoolStaysInItsRange(t *testing.T) {
	p := blockPool()
	lo, hi := netip.MustParseAddr("127.64.0.1"), netip.MustParseAddr("127.127.255.254")
	for range 600 {
		addr, ok := p.next()
		if !ok || addr.Compare(lo) < 0 || addr.Compare(hi) > 0 || addr.As4()[3] == 0 || addr.As4()[3] == 255 {
			t.Fatalf("address %s (%t) is outside 127.64.0.0/10 or a block's .1-.254", addr, ok)
		}
	}
}
