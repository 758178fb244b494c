package tunnel

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
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
const batchBytes = 64 << 10

// frameReader is a datagram socket that can hand over at once the
// datagrams that have arrived: readFrames appends to dst the frame of the
// next datagram, waiting for it until the read deadline, then the frames
// of those already waiting while dst is shorter than limit. dst has room
// for limit+frameRoom bytes. It returns at least one frame, or none and
// the error.
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

// readDatagramFrame reads one frame of r and appends it to dst (which has room
// for it, or grows). A length over MaxDatagram is an error.
func readDatagramFrame(r io.Reader, dst []byte) ([]byte, error) {
	at := len(dst)
	dst = append(dst, 0, 0)
	if _, err := io.ReadFull(r, dst[at:]); err != nil {
		return dst[:at], err
	}
	n := int(binary.BigEndian.Uint16(dst[at:]))
	if n > MaxDatagram {
		return dst[:at], fmt.Errorf("%w: length %d is over %d", errMalformedDatagram, n, MaxDatagram)
	}
	dst = append(dst, make([]byte, n)...)
	if _, err := io.ReadFull(r, dst[at+2:]); err != nil {
		return dst[:at], err
	}
	return dst, nil
}

// frameBuffered is whether r holds the whole of a next frame, so that
// reading it waits for nothing.
func frameBuffered(r *bufio.Reader) bool {
	if r.Buffered() < 2 {
		return false
	}
	head, _ := r.Peek(2) // buffered: Peek does not read
	return r.Buffered() >= 2+int(binary.BigEndian.Uint16(head))
}

// relayDatagrams carries the frames of ch to conn, a datagram socket (each
// Write one datagram, each Read one), and conn's datagrams back, batched
// (batchBytes) both ways: the frames that one read of ch brought are sent
// together (frameWriter), those conn's reads find waiting cross in one
// write of ch. It does so until ch ends, a frame is malformed (the error returned),
// or nothing has crossed either way for DatagramIdle. Both are closed when
// it returns.
func relayDatagrams(ch ssh.Channel, conn net.Conn) error {
	bufferDatagrams(conn)
	var last atomic.Int64 // unix nanoseconds of the latest datagram
	last.Store(time.Now().UnixNano())
	var once sync.Once
	var bad error
	stop := func(err error) {
		once.Do(func() {
			bad = err
			ch.Close()
			conn.Close()
		})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		pumpDatagrams(conn, &last, batchBytes, func(frames []byte) error { _, err := ch.Write(frames); return err })
		stop(nil)
	}()
	// Frames are read from a buffer of the channel's bytes: one Read of
	// the channel takes a burst's frames, not two per datagram.
	r := bufio.NewReaderSize(ch, batchBytes)
	w := framesTo(conn)
	var batch []byte // grows to the bursts the flow has
	for {
		var err error
		batch, err = readDatagramFrame(r, batch)
		if err != nil {
			if errors.Is(err, errMalformedDatagram) {
				stop(err)
			}
			stop(nil)
			break
		}
		if len(batch) < batchBytes && frameBuffered(r) {
			continue
		}
		last.Store(time.Now().UnixNano())
		w.writeFrames(batch) // a datagram the socket refuses is lost, as UDP's may be
		batch = batch[:0]
	}
	<-done
	return bad
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
		pumpDatagrams(a, &last, batchBytes, framesTo(b).writeFrames)
		b.Close()
		a.Close()
	}()
	pumpDatagrams(b, &last, batchBytes, framesTo(a).writeFrames)
	a.Close()
	b.Close()
	<-done
}

// pumpDatagrams reads the datagrams of conn as frames and hands them to
// write, as many at once as have arrived up to limit bytes (frameReader),
// until conn or write fails, or nothing has crossed
// either way for DatagramIdle: last is when the latest datagram crossed,
// which pumpDatagrams sets and whoever carries the other way sets too. An
// ICMP port unreachable, which loses a datagram, ends nothing.
func pumpDatagrams(conn net.Conn, last *atomic.Int64, limit int, write func(frames []byte) error) {
	fr := framesOf(conn)
	buf := make([]byte, 0, limit+frameRoom)
	for {
		conn.SetReadDeadline(time.Unix(0, last.Load()).Add(DatagramIdle))
		frames, err := fr.readFrames(buf[:0], limit)
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
