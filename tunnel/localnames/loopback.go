package localnames

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
)

// Pool hands out the loopback addresses of one run's names. Each
// address is claimed for as long as the run lasts (claimAddress, per OS),
// so that two runs at once never hand out the same address, whichever user
// started them: the claim is held by the kernel for the run's process and
// ends with it, even after kill -9.
type Pool struct {
	next func() (netip.Addr, bool) // the next candidate address
	// skip, if not nil, moves next past the addresses near the last
	// candidate, which another run holds: runs claim their addresses in
	// runs of consecutive ones.
	skip   func()
	claims []io.Closer
}

// maxTries bounds the addresses one Take tries: where every address
// answers (Linux, Windows) the pool has 16,384×254 of them, and when
// something holds them all (a UDP port Windows reserves makes every claim
// fail), trying them all would take hours. There, an address held
// elsewhere skips the rest of its /24 block: another run's thousands of
// names cost a few tries, not one each.
const maxTries = 256

// errPoolExhausted is returned when no candidate address is left, or
// maxTries of them were claimed elsewhere.
var errPoolExhausted = errors.New("every loopback address plug tried for a cluster name is taken: " + claimHolders +
	"; end the plug runs you no longer need (a run frees its addresses when it ends), then run again")

// Take claims the next free address of the pool, trying at most maxTries.
func (p *Pool) Take() (netip.Addr, error) {
	for range maxTries {
		addr, ok := p.next()
		if !ok {
			break
		}
		claim, err := claimAddress(addr)
		if errors.Is(err, errClaimedElsewhere) {
			if p.skip != nil {
				p.skip()
			}
			continue
		}
		if err != nil {
			return netip.Addr{}, err
		}
		p.claims = append(p.claims, claim)
		return addr, nil
	}
	return netip.Addr{}, errPoolExhausted
}

// Close gives back every address of the pool.
func (p *Pool) Close() {
	for _, c := range p.claims {
		c.Close()
	}
	p.claims = nil
}

// errClaimedElsewhere means another run holds the address.
var errClaimedElsewhere = errors.New("the address is claimed by another plug run")

// blockPool walks the /24 blocks of 127.64.0.0/10 from one chosen at
// random, addresses .1 to .254 of each: the pool on systems where all of
// 127.0.0.0/8 answers on loopback without configuration (Linux, Windows).
// 127.0.0.0/16 (127.0.0.1, 127.0.1.1 and systemd-resolved's 127.0.0.53)
// is never used.
func blockPool() *Pool { return blockPoolFrom(rand.IntN(poolBlocks)) }

// poolBlocks is how many /24 blocks blockPool walks.
const poolBlocks = 64 << 8

// blockPoolFrom is blockPool starting at block start of the range.
func blockPoolFrom(start int) *Pool {
	const first = 64 << 8 // 127.64.0.0/24
	i := 0
	return &Pool{next: func() (netip.Addr, bool) {
		if i >= poolBlocks*254 {
			return netip.Addr{}, false
		}
		block := first + (start+i/254)%poolBlocks
		host := 1 + i%254
		i++
		return netip.AddrFrom4([4]byte{127, byte(block >> 8), byte(block), byte(host)}), true
	}, skip: func() { i = ((i-1)/254 + 1) * 254 }}
}

// rangePool walks a fixed range of addresses, from first to last.
func rangePool(first, last netip.Addr) *Pool {
	cur := first
	return &Pool{next: func() (netip.Addr, bool) {
		if !cur.IsValid() || cur.Compare(last) > 0 {
			return netip.Addr{}, false
		}
		addr := cur
		cur = cur.Next()
		return addr, true
	}}
}

// claimError explains a claim the system refused.
func claimError(addr netip.Addr, err error) error {
	return fmt.Errorf("cannot claim the loopback address %s for a cluster name: %w", addr, err)
}
