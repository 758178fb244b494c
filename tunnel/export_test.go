package tunnel

import (
	"encoding/binary"
	"net"
)

// NameCost is nameCost, for the test that measures it.
const NameCost = nameCost

// DatagramRuns reads and writes the datagrams of a socket as plug does,
// in runs where the system can (frameReader, frameWriter): for the
// benchmarks' sender and echo.
type DatagramRuns struct {
	r      frameReader
	w      *frameWriter
	frames []byte
}

// NewDatagramRuns reads and writes c, a UDP socket or a flow of
// DatagramFlows.
func NewDatagramRuns(c net.Conn) *DatagramRuns {
	if u, ok := c.(*net.UDPConn); ok {
		bufferDatagrams(u)
		u.SetWriteBuffer(socketBuffer)
	}
	return &DatagramRuns{r: framesOf(c), w: framesTo(c), frames: make([]byte, 0, batchBytes+frameRoom)}
}

// Send sends datagrams, those of one size in a row in one write.
func (d *DatagramRuns) Send(datagrams ...[]byte) error {
	d.frames = d.frames[:0]
	for _, b := range datagrams {
		d.frames = appendFrame(d.frames, b)
	}
	return d.w.writeFrames(d.frames)
}

// Receive calls f with each datagram that arrived, waiting for the first
// until the read deadline.
func (d *DatagramRuns) Receive(f func(b []byte)) error {
	frames, err := d.r.readFrames(d.frames[:0], batchBytes)
	for len(frames) > 0 {
		n := int(binary.BigEndian.Uint16(frames))
		f(frames[2 : 2+n])
		frames = frames[2+n:]
	}
	return err
}

// Echo sends the datagrams that arrived back, in runs, until c fails.
func (d *DatagramRuns) Echo() error {
	for {
		frames, err := d.r.readFrames(d.frames[:0], batchBytes)
		if err != nil {
			return err
		}
		d.w.writeFrames(frames)
	}
}

// The lanes' request and channel type (lanes.go), for the tests that ask
// for a lane as a peer would.
const (
	LaneRequest  = laneRequest
	LaneJoinType = laneJoinType
)

// LaneToken is the token the agent gave the session's connection for its
// lanes; "" when it gave none.
func (s *Session) LaneToken() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return ""
	}
	return s.cur.welcome.LaneToken
}
