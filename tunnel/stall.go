package tunnel

import (
	"io"
	"net"
	"sync"
	"time"
)

// A connection through the agent whose far end does not take what it is
// sent (a service in the cluster that stopped reading, a caller that
// does not read its answer) makes the agent stop reading the connection's
// SSH channel, and x/crypto/ssh then keeps what the channel is sent, up to
// its fixed window of channelWindow. Such a stalled write is counted, after
// stallAfter, as channelWindow held for the connection's key (holdings),
// maxStripes of them for a striped connection; a write that would pass
// the key's or the agent's cap ends its connection instead, logged with
// the cap named.
const (
	channelWindow = 2 << 20 // x/crypto/ssh's, fixed
	stallAfter    = time.Second
)

// stallGuard is the end of a connection through the agent that the
// agent writes what the key's channel brings to, guarded as above.
type stallGuard struct {
	io.ReadWriteCloser
	dc    *devConn
	what  string // the connection, for the log
	bytes int    // what a stall is counted as

	mu      sync.Mutex
	writing bool // a Write is in progress
	held    bool // it is counted as stalled
}

// guardStalls guards end, where what the key of dc sends over a
// connection (over up to maxStripes channels when striped) is written,
// and makes its reads and writes raw (rawIO) where it is a TCP connection.
func (dc *devConn) guardStalls(end io.ReadWriteCloser, what string, striped bool) *stallGuard {
	if c, ok := end.(net.Conn); ok {
		end = rawIO(c)
	}
	g := &stallGuard{ReadWriteCloser: end, dc: dc, what: what, bytes: channelWindow}
	if striped {
		g.bytes *= maxStripes
	}
	return g
}

func (g *stallGuard) Write(b []byte) (int, error) {
	g.mu.Lock()
	g.writing = true
	g.mu.Unlock()
	t := time.AfterFunc(stallAfter, g.stalled)
	n, err := g.ReadWriteCloser.Write(b)
	t.Stop()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.writing = false
	if g.held {
		g.held = false
		g.dc.a.held.release(g.dc.fingerprint, g.bytes)
	}
	return n, err
}

// stalled counts a write in progress for stallAfter as holding a window,
// or ends the connection when that is over a cap.
func (g *stallGuard) stalled() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.writing || g.held {
		return
	}
	if err := g.dc.a.held.hold(g.dc.fingerprint, g.bytes); err != nil {
		g.dc.logf("ended a connection of %s (%s) to %s, whose far end has not taken what it is sent for %s: %v", g.dc.user, g.dc.fingerprint, g.what, stallAfter, err)
		g.ReadWriteCloser.Close() // the Write in progress returns
		return
	}
	g.held = true
}

// CloseWrite half-closes the guarded end when it can be, else closes it.
func (g *stallGuard) CloseWrite() error {
	if hc, ok := g.ReadWriteCloser.(halfCloser); ok {
		return hc.CloseWrite()
	}
	return g.ReadWriteCloser.Close()
}
