package tunnel

import (
	"net"

	"golang.org/x/sys/unix"
)

// shortenRetransmitWait sets the least time c, a TCP connection, waits for
// an acknowledgement before it sends a segment again (TCP_RTO_MIN_US, Linux
// 6.15 and later) to retransmitMin; elsewhere, and for other connections,
// it does nothing.
func shortenRetransmitWait(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		setSockopt(tc, unix.IPPROTO_TCP, unix.TCP_RTO_MIN_US, int(retransmitMin.Microseconds()))
	}
}
