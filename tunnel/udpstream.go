package tunnel

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"
)

// A flow can be carried striped (stripe.go), over as many channels as its
// rate needs: x/crypto/ssh's fixed 2 MiB window holds one channel to about
// 2 MiB per round trip, which at 20 ms is less than a busy flow sends.
// The stripe carries the byte stream of the flow's frames (udp.go) each
// way: what the socket received, as frames, and the peer's frames, whose
// datagrams the socket sends. The CLI opens a flow to a name as a
// stripeDatagramType channel, the agent hands a flow of a served UDP port
// over as a stripeForwardedDatagramType channel, each with a stripeOpen
// payload of the plain channel's, when both ends said so at hello
// (helloMsg.DatagramStripes, welcomeMsg.DatagramStripes) and stripe.
const (
	stripeDatagramType          = "stripe-datagram@plug"
	stripeForwardedDatagramType = "stripe-forwarded-datagram@plug"
)

// datagramStream is a datagram socket (conn) as the byte stream of its
// frames, for a striped flow. Read returns the frames of the datagrams
// that arrived, waiting for the first, and io.EOF once nothing has crossed
// either way for DatagramIdle; a Read shorter than what waits returns part
// of it, the rest at the next. Write takes frames, cut anywhere, and sends
// the datagrams of those it has whole, together (frameWriter); a frame
// longer than MaxDatagram fails it. CloseWrite does nothing: a peer whose
// side went idle sends nothing more, and the socket's datagrams still go
// to it until this side is idle too. Close closes conn.
type datagramStream struct {
	conn net.Conn
	r    frameReader
	w    *frameWriter
	last atomic.Int64 // unix nanoseconds of the latest datagram either way

	buf  []byte // the frames read
	out  []byte // those of buf not yet returned by Read
	part []byte // what Write took past the last whole frame
}

func newDatagramStream(conn net.Conn) *datagramStream {
	bufferDatagrams(conn)
	s := &datagramStream{conn: conn, r: framesOf(conn), w: framesTo(conn)}
	s.last.Store(time.Now().UnixNano())
	return s
}

func (s *datagramStream) Read(p []byte) (int, error) {
	if len(s.out) == 0 {
		// As many as wait, up to a batch (batchBytes) or p, whichever is
		// more: the stripe reads into a small buffer at first and moves to
		// a bulk one after a read that filled it, so a read that left
		// little for the next would keep it small.
		limit := max(len(p), batchBytes)
		if cap(s.buf) < limit+frameRoom {
			s.buf = make([]byte, 0, limit+frameRoom)
		}
		frames, err := nextFrames(s.conn, s.r, &s.last, s.buf[:0], limit)
		if err != nil {
			return 0, err
		}
		s.out = frames
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

func (s *datagramStream) Write(p []byte) (int, error) {
	s.part = append(s.part, p...)
	whole := 0
	for len(s.part)-whole >= 2 {
		n := int(binary.BigEndian.Uint16(s.part[whole:]))
		if n > MaxDatagram {
			return 0, fmt.Errorf("%w: length %d is over %d", errMalformedDatagram, n, MaxDatagram)
		}
		if len(s.part)-whole < 2+n {
			break
		}
		whole += 2 + n
	}
	if whole > 0 {
		s.last.Store(time.Now().UnixNano())
		s.w.writeFrames(s.part[:whole]) // a datagram the socket refuses is lost, as UDP's may be
		s.part = s.part[:copy(s.part, s.part[whole:])]
	}
	return len(p), nil
}

func (s *datagramStream) CloseWrite() error { return nil }

func (s *datagramStream) Close() error { return s.conn.Close() }

var _ io.ReadWriteCloser = (*datagramStream)(nil)
