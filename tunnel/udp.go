package tunnel

import (
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
// malformed: it closes that channel, and only that one.
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

// writeDatagram writes b as one frame.
func writeDatagram(w io.Writer, b []byte) error {
	if len(b) > MaxDatagram {
		return fmt.Errorf("a datagram of %d bytes is longer than %d", len(b), MaxDatagram)
	}
	frame := make([]byte, 2+len(b))
	binary.BigEndian.PutUint16(frame, uint16(len(b)))
	copy(frame[2:], b)
	_, err := w.Write(frame)
	return err
}

// readDatagram reads one frame into buf (at least MaxDatagram long) and
// returns its datagram. A length over MaxDatagram is an error.
func readDatagram(r io.Reader, buf []byte) ([]byte, error) {
	var head [2]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(head[:]))
	if n > MaxDatagram {
		return nil, fmt.Errorf("%w: length %d is over %d", errMalformedDatagram, n, MaxDatagram)
	}
	if _, err := io.ReadFull(r, buf[:n]); err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// relayDatagrams carries the frames of ch to conn, a datagram socket (each
// Write one datagram, each Read one), and conn's datagrams back, until ch
// ends, a frame is malformed (the error returned), or nothing has crossed
// either way for DatagramIdle. Both are closed when it returns.
func relayDatagrams(ch ssh.Channel, conn net.Conn) error {
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
		pumpDatagrams(conn, &last, func(b []byte) error { return writeDatagram(ch, b) })
		stop(nil)
	}()
	buf := make([]byte, MaxDatagram)
	for {
		b, err := readDatagram(ch, buf)
		if err != nil {
			if errors.Is(err, errMalformedDatagram) {
				stop(err)
			}
			stop(nil)
			break
		}
		last.Store(time.Now().UnixNano())
		conn.Write(b) // a datagram the socket refuses is lost, as UDP's may be
	}
	<-done
	return bad
}

// PairDatagrams carries the datagrams of a to b and those of b to a, both
// datagram sockets (each Write one datagram, each Read one), until either
// fails or nothing has crossed either way for DatagramIdle. Both are
// closed when it returns.
func PairDatagrams(a, b net.Conn) {
	var last atomic.Int64 // unix nanoseconds of the latest datagram
	last.Store(time.Now().UnixNano())
	done := make(chan struct{})
	go func() {
		defer close(done)
		pumpDatagrams(a, &last, func(d []byte) error { _, err := b.Write(d); return err })
		b.Close()
		a.Close()
	}()
	pumpDatagrams(b, &last, func(d []byte) error { _, err := a.Write(d); return err })
	a.Close()
	b.Close()
	<-done
}

// pumpDatagrams reads the datagrams of conn and hands each to write, until
// conn or write fails, or nothing has crossed either way for DatagramIdle:
// last is when the latest datagram crossed, which pumpDatagrams sets and
// whoever carries the other way sets too. An ICMP port unreachable, which
// loses a datagram, ends nothing.
func pumpDatagrams(conn net.Conn, last *atomic.Int64, write func([]byte) error) {
	buf := make([]byte, MaxDatagram)
	for {
		conn.SetReadDeadline(time.Unix(0, last.Load()).Add(DatagramIdle))
		n, err := conn.Read(buf)
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
		if write(buf[:n]) != nil {
			return
		}
	}
}
