package localnames

import (
	"io"
	"net/netip"
)

// NewPool is the pool of this system: on Windows, any 127.x.y.z
// answers on loopback.
func NewPool() *Pool { return blockPool() }

// claimAddress claims addr by binding UDP port claimPort on it.
func claimAddress(addr netip.Addr) (io.Closer, error) { return claimByUDP(addr) }
