package tunneltest

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// NewDelayLine listens on 127.0.0.1 and passes every connection to target,
// each byte oneWay later than it came, either way: a link of round trip
// 2×oneWay, without loss, for counting the round trips of an exchange. The
// TCP handshake to it is not delayed. It stops when the test ends.
func NewDelayLine(t testing.TB, target string, oneWay time.Duration) string {
	return NewLine(t, target, oneWay).Addr
}

// A Line is a delay line (NewDelayLine) that counts the connections it
// passed and can hold one up, as a TCP connection repairing a lost
// segment holds what is behind it.
type Line struct {
	Addr string // where it listens

	mu    sync.Mutex
	conns []*lineConn
}

// lineConn is one connection of a Line.
type lineConn struct {
	ends  [2]net.Conn                   // the accepted one and the one to target
	gate  atomic.Pointer[chan struct{}] // while set, nothing is passed until it closes
	stall atomic.Pointer[chan struct{}] // while set, nothing the client sends is read until it closes
}

// NewLine starts a Line to target: see NewDelayLine.
func NewLine(t testing.TB, target string, oneWay time.Duration) *Line {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	line := &Line{Addr: l.Addr().String()}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			t.Cleanup(func() { c.Close(); up.Close() })
			lc := &lineConn{ends: [2]net.Conn{c, up}}
			line.mu.Lock()
			line.conns = append(line.conns, lc)
			line.mu.Unlock()
			go lc.delay(up, c, oneWay, &lc.stall)
			go lc.delay(c, up, oneWay, nil)
		}
	}()
	return line
}

// Conns is how many connections the line has passed.
func (l *Line) Conns() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// Hold stops passing the bytes of connection i (0: the first the line
// passed), both ways, until the function it returns is called: they wait
// in the line, as behind a lost segment.
func (l *Line) Hold(i int) (release func()) {
	return l.shut(i, func(c *lineConn) *atomic.Pointer[chan struct{}] { return &c.gate })
}

// Stall stops reading what the client of connection i (0: the first the
// line passed) sends, until the function it returns is called, so that
// its writes back up in the client's system, as a TCP connection's do
// while its sending is held back (a repair, or a congestion control
// probing the round trip); what the target sends passes as before.
func (l *Line) Stall(i int) (release func()) {
	return l.shut(i, func(c *lineConn) *atomic.Pointer[chan struct{}] { return &c.stall })
}

// shut closes one gate of connection i, the one which returns, until the
// function it returns is called.
func (l *Line) shut(i int, which func(*lineConn) *atomic.Pointer[chan struct{}]) (release func()) {
	l.mu.Lock()
	g := which(l.conns[i])
	l.mu.Unlock()
	gate := make(chan struct{})
	g.Store(&gate)
	return func() {
		g.Store(nil)
		close(gate)
	}
}

// Cut closes connection i (0: the first the line passed) at both ends, as
// a link that went down would end it.
func (l *Line) Cut(i int) {
	l.mu.Lock()
	c := l.conns[i]
	l.mu.Unlock()
	c.ends[0].Close()
	c.ends[1].Close()
}

// delay passes what src sends to dst, each read oneWay after it came, and
// closes dst once src has ended and all of it is passed. While stall, if
// not nil, is set, src is not read.
func (lc *lineConn) delay(dst, src net.Conn, oneWay time.Duration, stall *atomic.Pointer[chan struct{}]) {
	type chunk struct {
		due  time.Time
		data []byte
	}
	line := make(chan chunk, 4096)
	go func() {
		defer dst.Close()
		timer := time.NewTimer(0)
		defer timer.Stop()
		for c := range line {
			timer.Reset(time.Until(c.due))
			<-timer.C
			if gate := lc.gate.Load(); gate != nil {
				<-*gate
			}
			if _, err := dst.Write(c.data); err != nil {
				src.Close()
				return
			}
		}
	}()
	defer close(line)
	for {
		if stall != nil {
			if gate := stall.Load(); gate != nil {
				<-*gate
			}
		}
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			line <- chunk{time.Now().Add(oneWay), buf[:n]}
		}
		if err != nil {
			return
		}
	}
}
