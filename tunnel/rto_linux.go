package tunnel

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// retransmitMin is the least time an SSH connection's TCP connection waits
// for an acknowledgement before it sends a segment again. Linux's own is
// 200 ms, and while a lost segment waits to be sent again, every channel
// of the connection waits behind it. It is above Linux's shortest delayed
// acknowledgement (40 ms), so that an acknowledgement held back on purpose
// is not taken for a loss; the wait still grows with the round trip
// measured, and doubles at each retransmission of the same segment.
const retransmitMin = 50 * time.Millisecond

// shortenRetransmitWait sets the least time c, a TCP connection, waits for
// an acknowledgement before it sends a segment again (TCP_RTO_MIN_US, Linux
// 6.15 and later) to retransmitMin; elsewhere, and for other connections,
// it does nothing.
func shortenRetransmitWait(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		setSockopt(tc, unix.IPPROTO_TCP, unix.TCP_RTO_MIN_US, int(retransmitMin.Microseconds()))
	}
}
