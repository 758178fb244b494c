package localnames

import (
	"io"
	"net"
	"net/netip"
)

// NewPool is the pool of this system: on Linux, any 127.x.y.z
// answers on loopback.
func NewPool() *Pool { return blockPool() }

// claimAddress claims addr by binding the abstract Unix socket
// "@plug/loopback/ADDR": abstract names are shared by every user of the
// network namespace, hold no file, and vanish with the process.
func claimAddress(addr netip.Addr) (io.Closer, error) {
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: "@plug/loopback/" + addr.String(), Net: "unixgram"})
	if IsAddrInUse(err) {
		return nil, errClaimedElsewhere
	}
	if err != nil {
		return nil, claimError(addr, err)
	}
	return c, nil
}

// claimHolders says what holds the addresses a run cannot claim.
const claimHolders = "other plug runs hold them (each claims its addresses with abstract sockets @plug/loopback/ADDRESS, which ss -xlp | grep plug/loopback lists with their processes)"
