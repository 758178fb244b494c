package localnames

import (
	"net/netip"
	"strings"
	"testing"
	"time"
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

// TestPoolTakeGivesUp: when every candidate address is taken, Take stops
// within a second and says what holds the addresses and what to do,
// however many candidates the pool has.
func TestPoolTakeGivesUp(t *testing.T) {
	first, last := netip.MustParseAddr("127.126.251.1"), netip.MustParseAddr("127.126.251.4")
	holder := rangePool(first, last)
	defer holder.Close()
	for range 4 {
		if _, err := holder.Take(); err != nil {
			t.Fatal(err)
		}
	}
	addr := first
	endless := &Pool{next: func() (netip.Addr, bool) { // the four taken ones, over and over
		if addr = addr.Next(); addr.Compare(last) > 0 {
			addr = first
		}
		return addr, true
	}}
	taken := make(chan error, 1)
	go func() {
		_, err := endless.Take()
		taken <- err
	}()
	select {
	case err := <-taken:
		if err == nil || !strings.Contains(err.Error(), "every loopback address plug tried for a cluster name is taken: other plug runs hold them") ||
			!strings.Contains(err.Error(), "end the plug runs you no longer need") {
			t.Fatalf("Take said %v", err)
		}
	case <-time.After(time.Second):
		t.Fatal("Take is still trying after a second")
	}
}

// TestBlockPoolSkipsAnotherRunsAddresses: a run whose walk starts where
// another run holds a thousand names' addresses still gets an address for
// each of its names, after a few tries.
func TestBlockPoolSkipsAnotherRunsAddresses(t *testing.T) {
	start := 5000 + int(time.Now().UnixNano()%1000) // apart from other tests' and runs' (random) starts
	held := blockPoolFrom(start)
	defer held.Close()
	for range 1000 {
		if _, err := held.Take(); err != nil {
			t.Fatal(err)
		}
	}
	p := blockPoolFrom(start)
	defer p.Close()
	for i := range 10 {
		if _, err := p.Take(); err != nil {
			t.Fatalf("name %d of a run starting where another holds 1,000 addresses: %v", i+1, err)
		}
	}
}
