package tunnel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
)

// ClientConfig says how the plug CLI reaches an agent.
type ClientConfig struct {
	Addr    string        // the agent's host:port
	User    string        // the SSH user name
	Signer  ssh.Signer    // the profile's key pair
	HostKey ssh.PublicKey // the agent's pinned host key; required
	Run     RunInfo

	// Events receives status lines for the terminal: connection lost and
	// regained, what the agent says about the names served. It may be
	// called from several goroutines at once, and must not block.
	Events func(Event)

	// Profile names the profile in error messages, if set.
	Profile string

	// KeepAlive is how often the client checks that the agent is still
	// there; three unanswered checks mean it is not. Default 5 s.
	KeepAlive time.Duration
}

// RunInfo identifies the run to the agent.
type RunInfo struct {
	ID      string // stable across reconnects; one is made when empty
	Version string // the CLI's version; default Version
	Serves  bool   // the run serves names (-s), rather than only consuming
}

// Session is a run's link to an agent. It survives dropped connections: it
// reconnects with backoff (0.5 s doubling to 5 s) until Close, says hello
// with the same run id so that the agent gives it back the names it kept,
// and asks for its names again. It ends with Close, or when the agent ends
// the run or refuses it on reconnect (see Err).
type Session struct {
	cfg        ClientConfig
	ctx        context.Context // ends with Close
	cancel     context.CancelFunc
	maintained chan struct{} // closed when the reconnect loop has returned
	done       chan struct{}
	finishOnce sync.Once
	err        error // why the session ended; set before done is closed

	names catalogState // what the agent last said the run can consume

	mu       sync.Mutex
	closed   bool
	cur      *clientConn   // the live connection; nil while reconnecting
	changed  chan struct{} // closed and replaced whenever cur changes
	forwards map[string]*forward
}

// forward is a name the run serves and the local address its callers reach.
type forward struct {
	name        string
	port        int
	local       string
	established bool        // served once: asked for again after a reconnect
	failing     atomic.Bool // the local address did not answer the last caller
}

const (
	reconnectMin     = 500 * time.Millisecond
	reconnectMax     = 5 * time.Second
	goodbyeTimeout   = 5 * time.Second
	localDialTimeout = 5 * time.Second
)

var errSessionClosed = errors.New("the session with the agent is closed")

// Connect opens a run on the agent at cfg.Addr. Its errors say what to do:
// *UnreachableError, *HostKeyError, *AuthError, *EndedError. Unless GOGC
// is set, it sets the process's garbage collector target for carrying
// streams (gc.go).
func Connect(ctx context.Context, cfg ClientConfig) (*Session, error) {
	if cfg.Addr == "" || cfg.User == "" || cfg.Signer == nil || cfg.HostKey == nil {
		return nil, errors.New("tunnel: a ClientConfig needs Addr, User, Signer and HostKey")
	}
	if cfg.User == getUser {
		return nil, errors.New("the user get only downloads plug from the agent; a profile needs another user name")
	}
	tuneGC()
	if cfg.Run.ID == "" {
		cfg.Run.ID = newRunID("")
	} else if err := checkRunID(cfg.Run.ID); err != nil {
		return nil, err
	}
	if cfg.Run.Version == "" {
		cfg.Run.Version = Version
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = defaultKeepAlive
	}
	s := &Session{
		cfg:        cfg,
		maintained: make(chan struct{}),
		done:       make(chan struct{}),
		changed:    make(chan struct{}),
		forwards:   map[string]*forward{},
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	cc, err := s.dial(ctx)
	if err != nil {
		s.cancel()
		return nil, err
	}
	s.setCurrent(cc)
	go s.maintain(cc)
	return s, nil
}

// Serve asks the agent to make name:clusterPort in the cluster reach local
// (host:port on this machine) for as long as the session lasts. While the
// session is reconnecting, Serve waits for it, within ctx.
// A refusal is a *ServeError saying why.
func (s *Session) Serve(ctx context.Context, name string, clusterPort int, local string) (Served, error) {
	if err := CheckName(name); err != nil {
		return Served{}, err
	}
	if err := CheckPort(clusterPort); err != nil {
		return Served{}, err
	}
	if _, _, err := net.SplitHostPort(local); err != nil {
		return Served{}, fmt.Errorf("the local address %q is not HOST:PORT, e.g. localhost:3000", local)
	}
	f := &forward{name: name, port: clusterPort, local: local}
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return Served{}, errSessionClosed
	case s.forwards[name] != nil:
		s.mu.Unlock()
		return Served{}, fmt.Errorf("%s is served by this run already", name)
	}
	s.forwards[name] = f
	s.mu.Unlock()
	for {
		cc, err := s.connected(ctx)
		if err != nil {
			s.dropForward(f)
			return Served{}, err
		}
		served, err := cc.requestForward(ctx, f)
		if errors.Is(err, errConnLost) {
			continue
		}
		if err != nil {
			s.dropForward(f)
			return Served{}, err
		}
		s.mu.Lock()
		f.established = true
		s.mu.Unlock()
		return served, nil
	}
}

// Dial connects to address ("name:port") in the cluster, through the agent.
// While the session is reconnecting, Dial waits for it, within ctx.
// The connection does not support deadlines.
func (s *Session) Dial(ctx context.Context, address string) (net.Conn, error) {
	host, portText, err := net.SplitHostPort(address)
	port, perr := strconv.Atoi(portText)
	if err != nil || perr != nil || host == "" || CheckPort(port) != nil {
		return nil, fmt.Errorf("%q is not NAME:PORT, e.g. my-service:8080", address)
	}
	for {
		cc, err := s.connected(ctx)
		if err != nil {
			return nil, err
		}
		conn, err := cc.dial(ctx, host, port)
		if !errors.Is(err, errConnLost) {
			return conn, err
		}
	}
}

// Close ends the run: it says goodbye, so the agent gives every name back at
// once, then closes the connection. Close during a reconnect connects once
// more to say it. Close is idempotent.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.done
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	<-s.maintained
	select {
	case <-s.done: // the agent ended the run already
		return nil
	default:
	}
	s.mu.Lock()
	cc := s.cur
	s.mu.Unlock()
	if cc == nil || cc.isGone() {
		ctx, cancel := context.WithTimeout(context.Background(), goodbyeTimeout)
		cc, _ = s.dial(ctx)
		cancel()
	}
	if cc != nil {
		cc.sayGoodbye()
		cc.conn.Close()
	}
	s.finish(nil)
	return nil
}

// Done is closed when the session has ended.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err says why the session ended once Done is closed: nil after Close,
// *EndedError when the agent ended the run, *AuthError or *HostKeyError
// when a reconnect was refused.
func (s *Session) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

// maintain reconnects whenever the connection drops, until Close.
func (s *Session) maintain(cc *clientConn) {
	defer close(s.maintained)
	for {
		select {
		case <-cc.gone:
		case <-s.ctx.Done():
			return
		}
		if s.ctx.Err() != nil {
			return
		}
		s.setCurrent(nil)
		switch e := cc.ended; {
		case e != nil && !e.Retry:
			s.finish(&EndedError{By: e.By, Reason: e.Reason})
			return
		case e != nil:
			s.event(Event{Kind: EventWarning, Text: fmt.Sprintf("%s (%s); reconnecting…", e.Reason, e.By)})
		default:
			s.event(Event{Kind: EventWarning, Text: fmt.Sprintf("connection to the agent at %s lost, reconnecting…", s.cfg.Addr)})
		}
		next, err := s.reconnect()
		if err != nil {
			s.event(Event{Kind: EventEnded, Text: err.Error()})
			s.finish(err)
			return
		}
		if next == nil {
			return
		}
		s.restore(next)
		s.setCurrent(next)
		cc = next
	}
}

// reconnect dials until it succeeds (with backoff), Close is called (nil,
// nil), or the agent refuses the run for good.
func (s *Session) reconnect() (*clientConn, error) {
	delay, reported := reconnectMin, ""
	for {
		cc, err := s.dial(s.ctx)
		if err == nil {
			return cc, nil
		}
		if s.ctx.Err() != nil {
			return nil, nil
		}
		var hostKey *HostKeyError
		var auth *AuthError
		var ended *EndedError
		if errors.As(err, &hostKey) || errors.As(err, &auth) || errors.As(err, &ended) {
			return nil, err
		}
		reason := err.Error()
		var unreach *UnreachableError
		if errors.As(err, &unreach) {
			reason = unreach.Reason
		}
		if reason != reported {
			s.event(Event{Kind: EventWarning, Text: "still reconnecting: " + reason})
			reported = reason
		}
		select {
		case <-time.After(delay):
		case <-s.ctx.Done():
			return nil, nil
		}
		delay = min(2*delay, reconnectMax)
	}
}

// restore asks for the run's names again on a new connection and says
// which were kept.
func (s *Session) restore(cc *clientConn) {
	s.mu.Lock()
	var again []*forward
	for _, f := range s.forwards {
		if f.established {
			again = append(again, f)
		}
	}
	s.mu.Unlock()
	var names []string
	for _, f := range again {
		_, err := cc.requestForward(s.ctx, f)
		if errors.Is(err, errConnLost) || s.ctx.Err() != nil {
			return // the next round will try again
		}
		if err != nil {
			s.dropForward(f)
			s.event(Event{Name: f.name, Kind: EventWarning, Text: fmt.Sprintf("%s:%d is no longer served: %v", f.name, f.port, err)})
			continue
		}
		names = append(names, fmt.Sprintf("%s:%d", f.name, f.port))
	}
	text := "reconnected"
	switch {
	case len(names) > 0 && cc.welcome.Resumed:
		text += "; " + joinSorted(names) + " kept"
	case len(names) > 0:
		text += "; " + joinSorted(names) + " served again"
	}
	s.event(Event{Kind: EventHealed, Text: text})
}

// connected returns the live connection, waiting for one while the session
// reconnects.
func (s *Session) connected(ctx context.Context) (*clientConn, error) {
	for {
		s.mu.Lock()
		cc, changed, closed := s.cur, s.changed, s.closed
		s.mu.Unlock()
		if closed {
			return nil, errSessionClosed
		}
		if cc != nil && !cc.isGone() {
			return cc, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.done:
			if s.err != nil {
				return nil, s.err
			}
			return nil, errSessionClosed
		}
	}
}

func (s *Session) setCurrent(cc *clientConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur = cc
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Session) dropForward(f *forward) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.forwards[f.name] == f {
		delete(s.forwards, f.name)
	}
}

func (s *Session) lookupForward(name string, port int) *forward {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.forwards[name]; f != nil && f.port == port {
		return f
	}
	return nil
}

func (s *Session) event(e Event) {
	if s.cfg.Events != nil {
		s.cfg.Events(e)
	}
}

func (s *Session) finish(err error) {
	s.finishOnce.Do(func() {
		s.err = err
		s.cancel()
		close(s.done)
	})
}
