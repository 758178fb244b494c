package tunnel

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// laneUnsent is the most bytes a lane's TCP connection keeps written but
// not yet sent (TCP_NOTSENT_LOWAT): past it, a write waits. A lane whose
// connection is repairing a lost segment sends less for a while; its
// writes then wait, so the pump that writes it lets the flow's next
// datagrams go to the other channels (datagramRelay), instead of queueing
// them behind the repair in the kernel's send buffer, which grows to
// megabytes: a queue of a hundred milliseconds and more at these rates.
const laneUnsent = 128 << 10

// keepUnsentShort sets a lane's TCP connection c (or the batchConn over
// it) to keep at most laneUnsent bytes unsent; elsewhere than on Linux,
// and for other connections, it does nothing.
func keepUnsentShort(c net.Conn) {
	if b, ok := c.(*batchConn); ok {
		c = b.Conn
	}
	if sc, ok := c.(syscall.Conn); ok {
		setSockopt(sc, unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, laneUnsent)
	}
}
