package tunnel

import (
	"encoding/binary"
	"net"
	"unsafe"

	"golang.org/x/sys/unix"
)

// On Linux a UDP socket of plug's takes datagrams that arrived coalesced
// (UDP_GRO): one read returns a run of datagrams of one size, each but
// the last exactly that size, and a control message saying the size. And
// a run of datagrams of one size to one destination leaves in one write
// (UDP_SEGMENT): the kernel cuts it into its datagrams, or, to a socket
// that takes them coalesced (loopback, a veth), hands it over whole. The
// datagrams on the wire are the same either way.

// segmentOffload is whether this system can send a run of datagrams in
// one write.
const segmentOffload = true

// takeCoalesced asks conn, a UDP socket, to hand over coalesced runs of
// datagrams. Failing that (an older kernel), it reads them one at a time.
func takeCoalesced(conn *net.UDPConn) { setSockopt(conn, unix.SOL_UDP, unix.UDP_GRO, 1) }

// coalescedSize is the size of each datagram of a read whose control
// messages are oob, when the read is a coalesced run; 0 when it is one
// datagram. It allocates nothing: it runs for every read of a socket.
func coalescedSize(oob []byte) int {
	for len(oob) > 0 {
		h, data, rest, err := unix.ParseOneSocketControlMessage(oob)
		if err != nil {
			return 0
		}
		if h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO && len(data) >= 4 {
			return int(binary.NativeEndian.Uint32(data))
		}
		oob = rest
	}
	return 0
}

// appendSegmentSize appends to oob the control message that sends a
// write as datagrams of size bytes each (the last may be shorter).
func appendSegmentSize(oob []byte, size int) []byte {
	at := len(oob)
	oob = append(oob, make([]byte, unix.CmsgSpace(2))...)
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[at]))
	h.Level = unix.SOL_UDP
	h.Type = unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(oob[at+unix.CmsgLen(0):], uint16(size))
	return oob
}

// coalescedSpace is the room of the control message of coalescedSize.
var coalescedSpace = unix.CmsgSpace(4)
