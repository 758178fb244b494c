//go:build !linux

package localnames

import (
	"errors"
	"io"
	"net"
	"net/netip"
)

// claimPort is the UDP port whose binding on an address claims it for a
// run, where abstract Unix sockets do not exist.
const claimPort = 65535

// claimByUDP claims addr by binding UDP claimPort on it.
func claimByUDP(addr netip.Addr) (io.Closer, error) {
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, claimPort)))
	switch {
	case IsAddrInUse(err):
		return nil, errClaimedElsewhere
	case isAddrNotAvailable(err):
		return nil, claimError(addr, errors.New("the address is not configured on the loopback interface; run "+SetupHow+" once"))
	case err != nil:
		return nil, claimError(addr, err)
	}
	return c, nil
}
