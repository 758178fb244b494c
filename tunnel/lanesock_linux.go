package tunnel

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// laneUnsent is the most bytes a lane's TCP connection keeps written but
// not yet sent (TCP_NOTSENT_LOWAT): past it, the connection's sender
// waits, and so, once a write waits for that sender (batchConn.room), do
// the pumps of the lane's channels, which let the flow's next datagrams
// go to the other channels (datagramRelay), instead of queueing them
// behind the repair in the kernel's send buffer, which grows to megabytes:
// a queue of a hundred milliseconds and more at these rates.
const laneUnsent = 128 << 10

// keepUnsentShort sets c, a lane's TCP connection, to keep at most
// laneUnsent bytes unsent; for another kind of connection it does
// nothing.
func keepUnsentShort(c net.Conn) {
	if sc, ok := c.(syscall.Conn); ok {
		setSockopt(sc, unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, laneUnsent)
	}
}
