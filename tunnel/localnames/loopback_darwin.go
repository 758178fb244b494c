package localnames

import (
	"io"
	"net/netip"
)

// On macOS only 127.0.0.1 answers on lo0 until more addresses are added:
// plug setup adds the aliases 127.77.0.1 to 127.77.0.254 at every boot
// (see setup_darwin.go), and runs share those.
var (
	darwinPoolFirst = netip.MustParseAddr("127.77.0.1")
	darwinPoolLast  = netip.MustParseAddr("127.77.0.254")
)

func NewPool() *Pool { return rangePool(darwinPoolFirst, darwinPoolLast) }

// claimAddress claims addr by binding UDP port claimPort on it; an alias
// that is missing means plug setup has not been run.
func claimAddress(addr netip.Addr) (io.Closer, error) { return claimByUDP(addr) }

// claimHolders says what holds the addresses a run cannot claim.
const claimHolders = "other plug runs, or other programs, hold UDP port 65535 on them (lsof -nP -iUDP:65535 lists them with their processes)"
