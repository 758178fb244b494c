package tunnel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
)

// UDP crosses the SSH connection on datagram channels: a channel of type
// datagramChannelType, opened by the CLI with the payload of a
// direct-tcpip channel (the name and port to reach), carries one flow —
// the datagrams between one local socket and the name's port in the
// cluster. Each datagram, in either direction, is preceded by its length
// as a 2-byte big-endian integer. A frame longer than MaxDatagram is
// malformed: it closes that channel, and only that one. The channel's
// bytes are a stream of frames: a write may hold several frames (batched,
// see batchBytes) and a frame may span SSH packets, as a reader of every
// version of plug takes them, so batching needed no new version of the
// channel.
//
// One flow per channel keeps replies with the socket that sent the request
// without a flow table on either side, and lets the agent count flows in
// the same per-key cap as TCP connections (Limits.ChannelsPerKey). A flow
// ends when it has carried nothing, either way, for DatagramIdle.
//
// The agent says it opens these channels in its welcome (Datagrams): the
// CLI opens none to an agent that did not say so, and OpenSSH clients,
// which never open them, see nothing of this.
//
// A run serves a name's UDP port with the global request
// datagramForwardRequest (cancelled with cancelDatagramForward), whose
// payload is tcpip-forward's; the agent says it takes it in its welcome
// (UDPServe). Each sender in the cluster is then one flow, which the agent
// carries to the run on a channel of type forwardedDatagramType, whose
// payload is forwarded-tcpip's (the name and port served, the sender's
// address and port); the run sends its datagrams to the local port it
// serves the name with, from a socket of the flow's own, and their replies
// back on the channel, which the agent sends to the sender from the name's
// port.
const (
	datagramChannelType    = "datagram@plug"
	datagramForwardRequest = "datagram-forward@plug"
	cancelDatagramForward  = "cancel-datagram-forward@plug"
	forwardedDatagramType  = "forwarded-datagram@plug"
	// MaxDatagram is the largest datagram carried: the largest a UDP/IPv4
	// packet holds.
	MaxDatagram = 65507
	// DatagramIdle is how long a flow lives without a datagram either way.
	DatagramIdle = 60 * time.Second
)

var errMalformedDatagram = errors.New("malformed datagram frame")

// batchBytes is how many bytes of frames one write to a channel gathers
// (over one datagram: a datagram is never split): each write carries the
// datagram that woke the writer and every datagram that arrived meanwhile,
// up to this much, so a burst crosses the connection in a few SSH packets,
// not one each. Nothing is held back for a later datagram: a datagram that
// finds the writer idle is written alone at once, so batching adds no delay.
// It is two SSH packets' data (channelData).
const batchBytes = 2 * channelData

// frameReader is a datagram socket that can hand over at once the
// datagrams that have arrived: readFrames appends to dst the frame of the
// next datagram, waiting for it until the read deadline, then the frames
// of those already waiting while dst is shorter than limit, growing dst
// as it must (to at most limit+frameRoom bytes). It returns at least one
// frame, or none and the error.
type frameReader interface {
	readFrames(dst []byte, limit int) ([]byte, error)
}

// framesOf is how conn's datagrams are read as frames: in batches where
// conn can (a flow of DatagramFlows; a UDP socket on Linux), else one
// datagram a read.
func framesOf(conn net.Conn) frameReader {
	if fr, ok := conn.(frameReader); ok {
		return fr
	}
	if fr := socketFrames(conn); fr != nil {
		return fr
	}
	return oneDatagram{conn}
}

// oneDatagram reads one datagram of conn as one frame.
type oneDatagram struct{ conn net.Conn }

func (o oneDatagram) readFrames(dst []byte, limit int) ([]byte, error) {
	at := len(dst)
	dst = slices.Grow(dst, 2+MaxDatagram)
	n, err := o.conn.Read(dst[at+2 : at+2+MaxDatagram])
	if err != nil {
		return dst[:at], err
	}
	return putFrameHeader(dst, at, n), nil
}

// maxRead is the room of one read of a socket: the largest datagram, or a
// coalesced run of datagrams (udpgso_linux.go), whose IP packet's length
// field bounds it below 64 KiB.
const maxRead = 1 << 16

// frameRoom is the most bytes of frames one read of a socket yields: its
// datagrams, each with its 2-byte length.
const frameRoom = maxRead + 2*maxSegments

// eachDatagram calls f with each datagram of b, one read of a socket (or
// one write of a run): one datagram, or when size is over 0 a coalesced
// run of datagrams of size bytes each (the last may be shorter).
func eachDatagram(b []byte, size int, f func(d []byte)) {
	for size > 0 && len(b) > size {
		f(b[:size])
		b = b[size:]
	}
	f(b)
}

// appendRun appends the frames of the datagrams of b (eachDatagram).
func appendRun(dst, b []byte, size int) []byte {
	eachDatagram(b, size, func(d []byte) { dst = appendFrame(dst, d) })
	return dst
}

// putFrameHeader frames the n bytes of a datagram read at dst[at+2:]:
// it writes their length at dst[at:] and returns dst up to their end.
func putFrameHeader(dst []byte, at, n int) []byte {
	dst = dst[:at+2+n]
	binary.BigEndian.PutUint16(dst[at:], uint16(n))
	return dst
}

// appendFrame appends the frame of datagram b (at most MaxDatagram bytes).
func appendFrame(dst, b []byte) []byte {
	return append(binary.BigEndian.AppendUint16(dst, uint16(len(b))), b...)
}

// frameStream reads a stream of frames, a datagram channel's bytes, into
// one buffer and hands over the whole frames that have arrived where they
// lie: no frame is copied, but for the start of one that a read cut off,
// which moves to the buffer's start.
type frameStream struct {
	r      io.Reader
	buf    []byte // read and not yet handed over; its capacity is the room of a read
	handed int    // bytes at buf's start that the latest next handed over
	filled bool   // the latest read filled the room it had: more may wait
	err    error  // of the latest read: returned once the whole frames before it are
}

// A frameStream's buffer starts at streamStart bytes, so that a flow that
// carries little holds little, and doubles, up to streamRoom, when a read
// fills the room it had or a frame does not fit. streamRoom is two
// batches (batchBytes) of the peer's, so that a read takes a burst that
// crossed in several writes and the runs of one size it sends fill
// (udpsend.go); it holds the largest frame.
const (
	streamStart = 8 << 10
	streamRoom  = 2 * batchBytes
)

func newFrameStream(r io.Reader) *frameStream {
	return &frameStream{r: r, buf: make([]byte, 0, streamStart)}
}

// next returns the whole frames read and not yet handed over, reading
// until there is one; they stay valid until the next call. A frame whose
// length is over MaxDatagram ends the stream with errMalformedDatagram,
// and the stream's end inside a frame with io.ErrUnexpectedEOF: the part
// of a frame is never handed over.
func (s *frameStream) next() ([]byte, error) {
	s.buf = s.buf[:copy(s.buf, s.buf[s.handed:])]
	s.handed = 0
	for {
		whole, err := wholeFrames(s.buf)
		switch {
		case err != nil:
			return nil, err
		case whole > 0:
			s.handed = whole
			return s.buf[:whole], nil
		case s.err == io.EOF && len(s.buf) > 0:
			return nil, io.ErrUnexpectedEOF
		case s.err != nil:
			return nil, s.err
		}
		if (s.filled || len(s.buf) == cap(s.buf)) && cap(s.buf) < streamRoom {
			s.buf = append(make([]byte, 0, min(2*cap(s.buf), streamRoom)), s.buf...)
		}
		var n int
		n, s.err = s.r.Read(s.buf[len(s.buf):cap(s.buf)])
		s.filled = len(s.buf)+n == cap(s.buf)
		s.buf = s.buf[:len(s.buf)+n]
	}
}

// wholeFrames is how many bytes at b's start are whole frames; an error
// when a frame's length is over MaxDatagram.
func wholeFrames(b []byte) (int, error) {
	at := 0
	for len(b)-at >= 2 {
		n := int(binary.BigEndian.Uint16(b[at:]))
		if n > MaxDatagram {
			return 0, fmt.Errorf("%w: length %d is over %d", errMalformedDatagram, n, MaxDatagram)
		}
		if len(b)-at < 2+n {
			break
		}
		at += 2 + n
	}
	return at, nil
}

// relayDatagrams carries the frames of ch to conn, a datagram socket (each
// Write one datagram, each Read one), and conn's datagrams back, batched
// both ways: the frames that one read of ch brought are sent together
// (frameStream, frameWriter), those conn's reads find waiting cross in one
// write of ch (batchBytes). It does so until ch ends, a frame is malformed
// (the error returned), or nothing has crossed either way for
// DatagramIdle. Both are closed when it returns.
func relayDatagrams(ch ssh.Channel, conn net.Conn) error {
	r := newDatagramRelay(conn)
	r.carry(ch, nil)
	return r.wait()
}

// datagramRelay carries one flow between conn, a datagram socket, and
// one or more channels of frames: its first channel, whose end ends the
// flow, and the lanes' channels that join it (lanes.go). Each channel
// has its own pair of pumps: what a channel brings is sent to conn as it
// comes, and each channel's pump reads conn in turn while its channel
// takes writes, so a channel whose connection is held up (TCP repairing
// a lost segment) holds only what it already carries: the next
// datagrams leave on the others. While a lane's channel carries the flow,
// the first channel's pump stands aside: the run's own connection also
// carries its TCP streams, and keeps what it cannot send yet in a send
// buffer of megabytes, which a lane does not (lanesock_linux.go).
// Datagrams of one flow may so arrive in another order than sent, as UDP
// allows.
type datagramRelay struct {
	conn    net.Conn
	turn    chan struct{} // held by the pump reading conn; the others wait in line for it
	last    atomic.Int64  // unix nanoseconds of the latest datagram, either way
	stopped chan struct{}
	pumps   sync.WaitGroup

	// firstWrite is held by a write of first: its own pump's, and a
	// lane's that ended (x/crypto/ssh's channel writes are not safe for
	// concurrent use).
	firstWrite sync.Mutex

	mu        sync.Mutex
	first     ssh.Channel // the flow's own channel; set before any lane's
	chans     []ssh.Channel
	ended     bool
	bad       error         // why it ended, when a frame was malformed
	lanes     int           // lanes' pumps running
	lanesGone chan struct{} // while lanes is over 0: closed when it is 0 again
}

// widening is a datagram socket whose queue grows with the channels that
// carry it (a flow of DatagramFlows).
type widening interface{ carriedBy(channels int) }

func newDatagramRelay(conn net.Conn) *datagramRelay {
	bufferDatagrams(conn)
	r := &datagramRelay{conn: conn, turn: make(chan struct{}, 1), stopped: make(chan struct{})}
	r.turn <- struct{}{}
	r.last.Store(time.Now().UnixNano())
	return r
}

// laneCarry is how a lane's channel joins a flow (datagramRelay.carry).
type laneCarry struct {
	// room is what the channel's pump waits for before it reads the
	// flow's socket: nil when its lane takes more writes now, else a
	// channel closed once it does (batchConn.room).
	room func() <-chan struct{}
	// gone is called once the channel is done with.
	gone func()
}

// carry adds ch to the channels of the flow: its first, whose end ends the
// flow, when lane is nil; else a lane's, whose end ends only its own part.
// If the flow has ended, ch is closed.
func (r *datagramRelay) carry(ch ssh.Channel, lane *laneCarry) {
	first := lane == nil
	gone := func() {}
	if !first {
		gone = lane.gone
	}
	r.mu.Lock()
	if r.ended {
		r.mu.Unlock()
		ch.Close()
		gone()
		return
	}
	if first {
		r.first = ch
	}
	r.chans = append(r.chans, ch)
	r.pumps.Add(2)
	r.mu.Unlock()
	var left atomic.Int32
	left.Store(2)
	done := func(err error, channelFailed bool) {
		switch {
		case err != nil:
			r.stop(err)
		case first || !channelFailed:
			r.stop(nil)
		default:
			ch.Close()
		}
		if left.Add(-1) == 0 {
			gone()
		}
		r.pumps.Done()
	}
	aside := r.standAside
	if !first {
		aside = lane.room
		r.laneCame()
	}
	go func() {
		failed := false
		if !first {
			defer r.laneLeft()
		}
		pumpDatagrams(r.conn, &r.last, r.turn, aside, batchBytes, func(frames []byte) error {
			var err error
			if first {
				err = r.writeFirst(frames)
			} else if _, err = writeData(ch, frames); err != nil {
				r.writeFirst(frames) // what the lane took when it ended goes on the flow's own channel
			}
			failed = err != nil
			return err
		})
		done(nil, failed)
	}()
	go func() {
		s := newFrameStream(ch)
		w := framesTo(r.conn)
		for {
			frames, err := s.next()
			if err != nil {
				if errors.Is(err, errMalformedDatagram) {
					done(err, true)
				} else {
					done(nil, true)
				}
				return
			}
			r.last.Store(time.Now().UnixNano())
			w.writeFrames(frames) // a datagram the socket refuses is lost, as UDP's may be
		}
	}()
}

// writeFirst writes frames on the flow's own channel.
func (r *datagramRelay) writeFirst(frames []byte) error {
	r.firstWrite.Lock()
	defer r.firstWrite.Unlock()
	_, err := writeData(r.first, frames)
	return err
}

// laneCame counts a lane's pump that starts: the first channel's stands
// aside until none is left.
func (r *datagramRelay) laneCame() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lanes == 0 {
		r.lanesGone = make(chan struct{})
	}
	r.lanes++
	r.widen()
}

// laneLeft counts a lane's pump that ended.
func (r *datagramRelay) laneLeft() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lanes--; r.lanes == 0 {
		close(r.lanesGone)
		r.lanesGone = nil
	}
	r.widen()
}

// widen tells conn how many channels carry the flow, where its queue grows
// with them. Called with r.mu held.
func (r *datagramRelay) widen() {
	if w, ok := r.conn.(widening); ok {
		w.carriedBy(1 + r.lanes)
	}
}

// standAside is what the first channel's pump waits for before it reads
// conn again: nil when no lane carries the flow.
func (r *datagramRelay) standAside() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lanesGone
}

// waitFor is what aside says to wait for; nil when aside is nil.
func waitFor(aside func() <-chan struct{}) <-chan struct{} {
	if aside == nil {
		return nil
	}
	return aside()
}

// stop ends the flow: every channel and conn are closed; err, if not nil,
// is what wait returns.
func (r *datagramRelay) stop(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return
	}
	r.ended, r.bad = true, err
	for _, ch := range r.chans {
		ch.Close()
	}
	r.conn.Close()
	close(r.stopped)
}

// wait waits until the flow has ended and its pumps are done, and says
// why, when a frame was malformed.
func (r *datagramRelay) wait() error {
	<-r.stopped
	r.pumps.Wait()
	return r.bad
}

// PairDatagrams carries the datagrams of a to b and those of b to a, both
// datagram sockets (each Write one datagram, each Read one), those that
// wait together sent together (frameWriter), until either fails or
// nothing has crossed either way for DatagramIdle. Both are closed when it
// returns.
func PairDatagrams(a, b net.Conn) {
	var last atomic.Int64 // unix nanoseconds of the latest datagram
	last.Store(time.Now().UnixNano())
	done := make(chan struct{})
	go func() {
		defer close(done)
		pumpDatagrams(a, &last, nil, nil, batchBytes, framesTo(b).writeFrames)
		b.Close()
		a.Close()
	}()
	pumpDatagrams(b, &last, nil, nil, batchBytes, framesTo(a).writeFrames)
	a.Close()
	b.Close()
	<-done
}

// pumpDatagrams reads the datagrams of conn as frames and hands them to
// write, as many at once as have arrived up to limit bytes (frameReader),
// until conn or write fails, or nothing has crossed either way for
// DatagramIdle: last is when the latest datagram crossed, which
// pumpDatagrams sets and whoever carries the other way sets too. An ICMP
// port unreachable, which loses a datagram, ends nothing. Given turn, the
// pumps of one conn read it in turn: each reads only while it holds the
// one token, which it passes on before it writes, to the pump that has
// waited longest (a channel hands a value to its first waiting receiver),
// so that the pump whose write is held up does not read again until the
// others have. Given aside, a pump that holds the turn and is told a
// channel to wait for gives the turn back and waits for it to close.
func pumpDatagrams(conn net.Conn, last *atomic.Int64, turn chan struct{}, aside func() <-chan struct{}, limit int, write func(frames []byte) error) {
	fr := framesOf(conn)
	var buf []byte // grows to the bursts conn has
	for {
		if turn != nil {
			<-turn
			if wait := waitFor(aside); wait != nil {
				turn <- struct{}{}
				<-wait
				continue
			}
		}
		conn.SetReadDeadline(time.Unix(0, last.Load()).Add(DatagramIdle))
		frames, err := fr.readFrames(buf[:0], limit)
		if turn != nil {
			turn <- struct{}{}
		}
		buf = frames
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			if time.Since(time.Unix(0, last.Load())) < DatagramIdle {
				continue
			}
			return
		case errors.Is(err, syscall.ECONNREFUSED):
			continue
		case err != nil:
			return
		}
		last.Store(time.Now().UnixNano())
		if write(frames) != nil {
			return
		}
	}
}
