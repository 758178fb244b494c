package main

import (
	"encoding/binary"
	"net"
	"net/netip"
	"syscall"
	"unsafe"
)

// The UDP measurement's sender and echo move datagrams in runs, on the
// straight path and through plug alike: a run of datagrams of one size
// leaves in one write (UDP_SEGMENT: the kernel cuts it into its datagrams,
// or hands it whole to a socket that takes runs), and a socket takes the
// datagrams that arrive together in one read (UDP_GRO). The datagrams on
// the wire are those of one write each; only the system calls are fewer,
// so that the measurement is bound by the path, not by the sender's and
// the echo's system call per datagram.

// Linux's UDP options, absent from package syscall.
const (
	solUDP     = 17  // SOL_UDP
	udpSegment = 103 // UDP_SEGMENT
	udpGRO     = 104 // UDP_GRO
	// udpRun is how many datagrams one write sends at most: the kernel's
	// UDP_MAX_SEGMENTS.
	udpRun = 64
	// udpRunBytes is how many bytes one write sends at most: a run is one
	// UDP packet until the kernel cuts it, so its length must fit an IPv4
	// packet's (the kernel refuses a longer one with EMSGSIZE).
	udpRunBytes = 65507
)

// runBytes is how many bytes a run of datagrams of size bytes holds at
// most: udpRun of them, as many as fit udpRunBytes.
func runBytes(size int) int {
	return min(udpRun, max(1, udpRunBytes/size)) * size
}

// takeRuns asks c to hand over the datagrams that arrived together in one
// read (runReader).
func takeRuns(c *net.UDPConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), solUDP, udpGRO, 1) }); err != nil {
		return err
	}
	return serr
}

// segmentControl is the control message that sends a write as datagrams
// of size bytes each, the last maybe shorter.
func segmentControl(size int) []byte {
	b := make([]byte, syscall.CmsgSpace(2))
	h := (*syscall.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level = solUDP
	h.Type = udpSegment
	h.SetLen(syscall.CmsgLen(2))
	binary.NativeEndian.PutUint16(b[syscall.CmsgLen(0):], uint16(size))
	return b
}

// writeRun sends b as datagrams of size bytes each (the last maybe
// shorter) to addr, or to c's peer when addr is not valid: in one write,
// or, where the system refuses that, one write per datagram.
func writeRun(c *net.UDPConn, b []byte, size int, addr netip.AddrPort) error {
	if len(b) <= size {
		_, _, err := c.WriteMsgUDPAddrPort(b, nil, addr)
		return err
	}
	if _, _, err := c.WriteMsgUDPAddrPort(b, segmentControl(size), addr); err == nil {
		return nil
	}
	for len(b) > 0 {
		d := b[:min(size, len(b))]
		if _, _, err := c.WriteMsgUDPAddrPort(d, nil, addr); err != nil {
			return err
		}
		b = b[len(d):]
	}
	return nil
}

// runReader reads the datagrams of a socket that takes runs (takeRuns)
// one at a time.
type runReader struct {
	c    *net.UDPConn
	buf  []byte
	oob  []byte
	rest []byte // the datagrams of the last read not yet returned
	size int    // their size; 0: rest is one datagram
	from netip.AddrPort
}

func newRunReader(c *net.UDPConn) *runReader {
	return &runReader{c: c, buf: make([]byte, 1<<16), oob: make([]byte, syscall.CmsgSpace(4))}
}

// next returns the next datagram, read by a read of the socket (within
// its read deadline) when the last read's are all returned, and its
// sender. It is valid until the next read.
func (r *runReader) next() ([]byte, netip.AddrPort, error) {
	if len(r.rest) == 0 {
		n, oobn, _, from, err := r.c.ReadMsgUDPAddrPort(r.buf, r.oob)
		if err != nil {
			return nil, from, err
		}
		r.rest, r.size, r.from = r.buf[:n], runSize(r.oob[:oobn]), from
		if r.size == 0 || n == 0 {
			r.size = max(n, 1)
			if n == 0 {
				return r.buf[:0], from, nil
			}
		}
	}
	d := r.rest[:min(r.size, len(r.rest))]
	r.rest = r.rest[len(d):]
	return d, r.from, nil
}

// more is whether datagrams of the last read are left for next.
func (r *runReader) more() bool { return len(r.rest) > 0 }

// runSize is the size of each datagram of a read that returned a run
// (its control messages oob say so); 0 for one datagram.
func runSize(oob []byte) int {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if m.Header.Level == solUDP && m.Header.Type == udpGRO && len(m.Data) >= 4 {
			return int(binary.NativeEndian.Uint32(m.Data))
		}
	}
	return 0
}
