package tunnel

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
)

// closedError is a handshake the agent ended by closing the connection
// before authentication was over.
type closedError struct {
	busy bool  // the agent said it was busy
	err  error // the error to report if no try succeeds
}

func (e *closedError) Error() string { return e.err.Error() }

// An agent closes a connection before its handshake when too many from
// the same address (or from all) are in theirs (limits.go): a burst of
// runs behind one NAT address meets it. The CLI tries such a connection
// again, after a jittered delay growing from retryFirst to retryMax, for
// at most busyRetryFor in all when the agent said it was busy (busyPrefix),
// closedRetryFor when it closed or reset the connection without a word (an
// older agent does so, as does a server that is no agent). Nothing else is
// tried again: a refused key, a host key mismatch or a refused run have a
// cause the developer must see at once.
const (
	retryFirst     = 100 * time.Millisecond
	retryMax       = 2 * time.Second
	busyRetryFor   = 15 * time.Second
	closedRetryFor = 3 * time.Second
)

// handshake is handshakeOnce, tried again while the agent closes the
// connection during the handshake (see retryFirst), within ctx. The first
// time, an EventInfo says so.
func (s *Session) handshake(ctx context.Context) (conn ssh.Conn, chans <-chan ssh.NewChannel, reqs <-chan *ssh.Request, abort func() bool, err error) {
	start, delay, told := time.Now(), retryFirst, false
	for {
		conn, chans, reqs, abort, err = s.handshakeOnce(ctx, nil)
		var closed *closedError
		if !errors.As(err, &closed) {
			return conn, chans, reqs, abort, err
		}
		budget, text := closedRetryFor, "the agent closed the connection during the SSH handshake; trying again"
		if closed.busy {
			budget, text = busyRetryFor, "the agent is busy (too many connections being set up from this address); trying again"
		}
		wait := delay/2 + rand.N(delay/2+1)
		if time.Since(start)+wait > budget {
			return nil, nil, nil, nil, closed.err
		}
		if !told {
			s.event(Event{Kind: EventInfo, Text: text})
			told = true
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, nil, nil, nil, closed.err
		}
		delay = min(2*delay, retryMax)
	}
}

// closedEarly classifies a failed handshake on a connection whose first
// bytes read were head: a *closedError when the agent said it was busy, or
// closed or reset the connection; nil otherwise.
func closedEarly(addr string, err error, head []byte) *closedError {
	if busy := busyReason(head); busy != "" {
		return &closedError{busy: true, err: &UnreachableError{Addr: addr, Reason: "the agent is busy: " + busy, Err: err}}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isPeerReset(err) {
		return &closedError{err: &UnreachableError{Addr: addr, Reason: "no plug agent answered there (" + err.Error() + ")", Err: err}}
	}
	return nil
}

// busyReason is what an agent said in its busy line (busyPrefix), among
// the lines before the SSH version line in head; "" if it said none.
func busyReason(head []byte) string {
	for line := range strings.Lines(string(head)) {
		if strings.HasPrefix(line, "SSH-") {
			return ""
		}
		if why, ok := strings.CutPrefix(line, busyPrefix); ok && strings.HasSuffix(line, "\n") {
			return printableLines(strings.TrimSpace(why))
		}
	}
	return ""
}

// headConn records the first headMax bytes read from a connection: what a
// server says before its SSH version line is there (an SSH client ignores
// it, and an agent's version and the lines before it fit in 255 bytes, as
// RFC 4253 requires).
type headConn struct {
	net.Conn
	full atomic.Bool // head holds headMax bytes: reads are not recorded
	mu   sync.Mutex
	head []byte
}

const headMax = 256

func (c *headConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.full.Load() {
		c.mu.Lock()
		c.head = append(c.head, p[:min(n, headMax-len(c.head))]...)
		c.full.Store(len(c.head) == headMax)
		c.mu.Unlock()
	}
	return n, err
}

// first returns the bytes recorded.
func (c *headConn) first() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.head
}
