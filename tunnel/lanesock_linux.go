package tunnel

import (
	"net"
	"syscall"
	"unsafe"

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

// laneRepairs returns a function that reports whether c's TCP connection
// (c, or the batchConn over it) is repairing a loss: in fast recovery, or
// sending again after a retransmission timeout (tcp_info's ca_state); nil
// when it cannot be read. Each call is one getsockopt, which allocates
// nothing; the function is one pump's (it is not safe for concurrent use).
func laneRepairs(c net.Conn) func() bool {
	if b, ok := c.(*batchConn); ok {
		c = b.Conn
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	w := &repairWatch{rc: rc}
	w.read = w.readState
	return w.repairing
}

// The states of tcp_info's ca_state (include/uapi/linux/tcp.h) from which
// a connection is repairing a loss: TCP_CA_Recovery and TCP_CA_Loss.
const tcpCARecovery = 3

// repairWatch reads the congestion state of one TCP connection.
type repairWatch struct {
	rc      syscall.RawConn
	info    [2]byte // tcp_info's first bytes: tcpi_state, tcpi_ca_state
	caState byte
	read    func(fd uintptr) // readState, made once
}

func (w *repairWatch) readState(fd uintptr) {
	n := uint32(len(w.info))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.IPPROTO_TCP, unix.TCP_INFO,
		uintptr(unsafe.Pointer(&w.info[0])), uintptr(unsafe.Pointer(&n)), 0)
	w.caState = 0
	if errno == 0 && n == uint32(len(w.info)) {
		w.caState = w.info[1]
	}
}

func (w *repairWatch) repairing() bool {
	return w.rc.Control(w.read) == nil && w.caState >= tcpCARecovery
}
