//go:build !linux

package tunnel

import (
	"net"
	"net/netip"
)

// Elsewhere than on Linux plug's UDP sockets use the runtime's own calls;
// see udpraw_linux.go.

// datagramSender sends run, always one datagram here (segmentOffload is
// false), to to, or to c's peer when to is not valid.
func datagramSender(c *net.UDPConn, to netip.AddrPort) func(run [][]byte, oob []byte) error {
	return func(run [][]byte, oob []byte) error {
		_, _, err := c.WriteMsgUDPAddrPort(run[0], oob, to)
		return err
	}
}

func datagramReceiver(c *net.UDPConn) func(b, oob []byte) (n, oobn int, from netip.AddrPort, err error) {
	return func(b, oob []byte) (int, int, netip.AddrPort, error) {
		n, oobn, _, from, err := c.ReadMsgUDPAddrPort(b, oob)
		return n, oobn, from, err
	}
}
