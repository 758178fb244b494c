package tunnel

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"syscall"
)

// maxSegments is how many datagrams one write of a run carries: the
// kernel's UDP_MAX_SEGMENTS (64 since Linux 4.18).
const maxSegments = 64

// frameWriter sends the datagrams of batches of frames (udp.go) to one
// destination. Where the system can (segmentOffload) and conn is a UDP
// socket, each run of datagrams of one size (the last of a run may be
// shorter) leaves in one write, up to maxSegments datagrams and
// MaxDatagram bytes, from where its frames lie; else each datagram is one
// write. A run the system refuses to send as one is sent a datagram at a
// time, and so is all that the writer sends after it.
type frameWriter struct {
	send    func(run [][]byte, oob []byte) error // one write: a datagram, or a run where oob says its size
	from    []byte                               // the control message every write carries; nil: none
	offload bool
	run     [][]byte // a run's datagrams, in the frames
	oob     []byte
}

// framesTo is the frameWriter of conn: a connected UDP socket, a flow of
// DatagramFlows (whose writes carry its control message), or any other
// datagram conn, each Write one datagram.
func framesTo(conn net.Conn) *frameWriter {
	switch c := conn.(type) {
	case *net.UDPConn:
		return &frameWriter{offload: segmentOffload, send: datagramSender(c, netip.AddrPort{})}
	case *datagramFlow:
		return &frameWriter{offload: segmentOffload, from: c.from, send: datagramSender(c.d.pc, c.src)}
	}
	return &frameWriter{send: func(run [][]byte, _ []byte) error { _, err := conn.Write(run[0]); return err }}
}

// writeFrames sends the datagrams of frames, well-formed frames. An ICMP
// port unreachable, which loses a datagram, is no error; it returns the
// first other error of a write.
func (w *frameWriter) writeFrames(frames []byte) error {
	var failed error
	note := func(err error) {
		if err != nil && failed == nil && !errors.Is(err, syscall.ECONNREFUSED) {
			failed = err
		}
	}
	for len(frames) > 0 {
		size := int(binary.BigEndian.Uint16(frames))
		w.run = append(w.run[:0], frames[2:2+size])
		frames = frames[2+size:]
		bytes := size
		for w.offload && size > 0 && len(w.run) < maxSegments && len(frames) > 0 {
			n := int(binary.BigEndian.Uint16(frames))
			if n == 0 || n > size || bytes+n > MaxDatagram {
				break
			}
			w.run = append(w.run, frames[2:2+n])
			frames = frames[2+n:]
			bytes += n
			if n < size {
				break // a shorter datagram ends a run
			}
		}
		if len(w.run) == 1 {
			note(w.send(w.run, w.from))
			continue
		}
		w.oob = appendSegmentSize(append(w.oob[:0], w.from...), size)
		err := w.send(w.run, w.oob)
		if err == nil || errors.Is(err, syscall.ECONNREFUSED) {
			continue
		}
		w.offload = false
		for i := range w.run {
			note(w.send(w.run[i:i+1], w.from))
		}
	}
	return failed
}
