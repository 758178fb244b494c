package tunnel

import (
	"context"
	"errors"
	"fmt"
	"io"
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

	// Asks are the names the run serves from its start. Connect asks for
	// them with its hello, in the message that opens the control channel,
	// which saves the round trips of a hello and of a forward request
	// each; Serve, ServeFiltered or ServeUDP of the same name, port, local
	// address and filter then returns the agent's answer. An agent older
	// than that is asked by those calls, as names not asked for here are.
	Asks []Ask

	// NamesWhenAsked has the agent tell the session the catalog only
	// after AskNames: a run that may not need the cluster's names (its
	// command looks none up) then costs the agent and this machine nothing
	// for them, whatever the cluster holds. Otherwise, and with an agent
	// older than that, the catalog comes from the start.
	NamesWhenAsked bool
}

// Ask is a name a run serves from its start (ClientConfig.Asks): Name's
// port Port (a UDP port with UDP) in the cluster reaches Local, only the
// requests Filter matches when it is not empty.
type Ask struct {
	Name   string
	Port   int
	UDP    bool
	Local  string
	Filter Filter
}

// RunInfo identifies the run to the agent.
type RunInfo struct {
	ID      string // stable across reconnects; one is made when empty
	Version string // the CLI's version; default Version
	Serves  bool   // the run serves names (-s), rather than only consuming
	Comment string // the comment of the public key, shown beside its fingerprint in plug who
	// Container is ContainerDockerrun when CMD runs in a local Docker
	// container; the agent shows it in plug who and its audit.
	Container string
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
	skewOnce   sync.Once // the warning of a minor version skew
	err        error     // why the session ended; set before done is closed

	names      catalogState // what the agent last said the run can consume
	namesAsked atomic.Bool  // AskNames was called

	mu       sync.Mutex
	closed   bool
	cur      *clientConn // the live connection; nil while reconnecting
	changed  broadcast   // woken whenever cur changes
	forwards map[string]*forward
}

// forward is a name the run serves and the local address its callers reach.
type forward struct {
	name        string
	port        int
	udp         bool // port and local are UDP ports
	local       string
	filter      Filter        // a personal takeover's; empty for a full one; none for UDP
	asked       *askedForward // asked for with the hello, until the answer is taken
	since       time.Time     // when it was asked for
	established bool          // served once: asked for again after a reconnect
	answered    atomic.Bool   // the local address has answered a caller
	failing     atomic.Bool   // the local address did not answer the last caller
}

const (
	reconnectMin     = 500 * time.Millisecond
	reconnectMax     = 5 * time.Second
	goodbyeTimeout   = 5 * time.Second
	localDialTimeout = 5 * time.Second
	// localStartGrace is how long after a name is served its local address
	// may not answer before the developer is told: CMD starts after.
	localStartGrace = 10 * time.Second
	// moveTimeout bounds the reconnect to another agent when the agent
	// moves the run (Session.move).
	moveTimeout = 10 * time.Second
	// The old connection of a moved run goes on taking callers (the
	// cluster's routing may send some there a moment longer) until none has
	// come for moveQuiet and those it carries have finished, and for at
	// least moveDrain and at most moveDrainMax.
	moveDrain    = 3 * time.Second
	moveQuiet    = 2 * time.Second
	moveDrainMax = 20 * time.Second
)

var errSessionClosed = errors.New("the session with the agent is closed")

// Connect opens a run on the agent at cfg.Addr. Its errors say what to do:
// *UnreachableError, *HostKeyError, *AuthError, *EndedError.
func Connect(ctx context.Context, cfg ClientConfig) (*Session, error) {
	if cfg.Addr == "" || cfg.User == "" || cfg.Signer == nil || cfg.HostKey == nil {
		return nil, errors.New("tunnel: a ClientConfig needs Addr, User, Signer and HostKey")
	}
	if cfg.User == getUser {
		return nil, errors.New("the user get only downloads plug from the agent; a profile needs another user name")
	}
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
		forwards:   map[string]*forward{},
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	var asks []*forward
	for _, a := range cfg.Asks {
		f := &forward{name: a.Name, port: a.Port, udp: a.UDP, local: a.Local, filter: a.Filter, since: time.Now()}
		if f.check() == nil && s.forwards[f.name] == nil {
			s.forwards[f.name] = f
			asks = append(asks, f)
		}
	}
	cc, err := s.dialAsking(ctx, asks)
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
// Every error is a *ServeError naming the name and port, and saying why.
func (s *Session) Serve(ctx context.Context, name string, clusterPort int, local string) (Served, error) {
	return s.ServeFiltered(ctx, name, clusterPort, local, Filter{})
}

// ServeFiltered is Serve of a personal takeover: only the HTTP requests
// filter
// matches reach local; the agent sends every other caller to the deployed
// service (see Filter). An empty filter is Serve. An agent that does not route
// by filter refuses it, saying so, and serves nothing.
func (s *Session) ServeFiltered(ctx context.Context, name string, clusterPort int, local string, filter Filter) (Served, error) {
	return s.serve(ctx, &forward{name: name, port: clusterPort, local: local, filter: filter})
}

// ServeUDP asks the agent to make name's UDP port clusterPort in the
// cluster reach local (host:port, a UDP port on this machine) for as long
// as the session lasts, as Serve does for TCP: each sender in the cluster
// is one flow, sent to local from a socket of its own, whose replies go
// back to the sender; a flow ends after DatagramIdle without a datagram
// either way. An agent or a platform that does not serve UDP refuses it
// with a *ServeError saying so.
func (s *Session) ServeUDP(ctx context.Context, name string, clusterPort int, local string) (Served, error) {
	return s.serve(ctx, &forward{name: name, port: clusterPort, udp: true, local: local})
}

// serve asks for f (its name, port, protocol, local address and filter);
// any error is a *ServeError naming f.
func (s *Session) serve(ctx context.Context, f *forward) (Served, error) {
	served, err := s.request(ctx, f)
	var refused *ServeError
	if err != nil && !errors.As(err, &refused) {
		err = &ServeError{Name: f.name, Port: f.port, UDP: f.udp, Reason: err.Error(), Err: err}
	}
	return served, err
}

// check refuses a forward the agent would: a bad name, filter, port or
// local address.
func (f *forward) check() error {
	if err := CheckName(f.name); err != nil {
		return err
	}
	if err := f.filter.Check(); err != nil {
		return err
	}
	if err := CheckPort(f.port); err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(f.local); err != nil {
		return fmt.Errorf("the local address %q is not HOST:PORT, e.g. localhost:3000", f.local)
	}
	return nil
}

// sameAsk reports whether g asks for what f does.
func (f *forward) sameAsk(g *forward) bool {
	return f.name == g.name && f.port == g.port && f.udp == g.udp && f.local == g.local && f.filter.String() == g.filter.String()
}

// request is serve's work: it checks f and asks the agent for it until it
// answers or ctx ends. A forward Connect asked for with the hello is not
// asked again: its answer is awaited.
func (s *Session) request(ctx context.Context, f *forward) (Served, error) {
	if err := f.check(); err != nil {
		return Served{}, err
	}
	f.since = time.Now()
	s.mu.Lock()
	cur := s.forwards[f.name]
	switch {
	case s.closed:
		s.mu.Unlock()
		return Served{}, errSessionClosed
	case cur != nil && cur.asked != nil && cur.sameAsk(f):
		a := cur.asked
		cur.asked = nil // this call takes the answer
		s.mu.Unlock()
		return s.awaitAsked(ctx, cur, a)
	case cur != nil:
		s.mu.Unlock()
		return Served{}, fmt.Errorf("%s is served by this run already", f.name)
	}
	s.forwards[f.name] = f
	s.mu.Unlock()
	return s.requestAgain(ctx, f)
}

// requestAgain asks for f, which is in forwards, on the live connection,
// and on the next one if that is lost first.
func (s *Session) requestAgain(ctx context.Context, f *forward) (Served, error) {
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
	conn, _, err := s.open(ctx, "direct-tcpip", address, nil, nil)
	if err != nil {
		return nil, err
	}
	return conn, nil
}

// open opens a channel of chanType to address ("name:port") through the
// agent, waiting for a reconnecting session within ctx. Given local, the
// connection a direct-tcpip channel is to carry, and a connection that
// stripes, it opens the first channel of a striped connection for local
// instead, and returns that too. Given flow, the relay of a datagram
// channel's flow, and a connection that takes lanes, it opens the flow
// with an id (lanes.go), which the channelConn returned names.
func (s *Session) open(ctx context.Context, chanType, address string, local io.ReadWriteCloser, flow *datagramRelay) (*channelConn, *stripe, error) {
	host, portText, err := net.SplitHostPort(address)
	port, perr := strconv.Atoi(portText)
	if err != nil || perr != nil || host == "" || CheckPort(port) != nil {
		return nil, nil, fmt.Errorf("%q is not NAME:PORT, e.g. my-service:8080", address)
	}
	for {
		cc, err := s.connected(ctx)
		if err != nil {
			return nil, nil, err
		}
		if chanType == datagramChannelType && !cc.welcome.Datagrams {
			return nil, nil, &DialError{Address: address, Reason: fmt.Sprintf("the agent (plug %s) does not carry UDP; update the agent", printable(cc.welcome.Version))}
		}
		typ, st, id := chanType, (*stripe)(nil), uint32(0)
		switch {
		case local != nil && cc.stripes.striping():
			typ, st = stripeDirectType, cc.stripes.newStripe(local)
			id = st.id
		case flow != nil && cc.lanes.on():
			typ, id = datagramLanedType, cc.lanes.add(flow)
		}
		conn, err := cc.dial(ctx, typ, host, port, id)
		switch {
		case err != nil && st != nil:
			st.drop()
		case err != nil && typ == datagramLanedType:
			cc.lanes.remove(id)
		case err == nil && typ == datagramLanedType:
			conn.cc, conn.flow = cc, id
		}
		if !errors.Is(err, errConnLost) {
			return conn, st, err
		}
	}
}

// Close ends the run: it says goodbye, so the agent gives every name back at
// once, lets the callers the connection still carries finish (at most 5 s;
// the agent sends it no new ones once the names are back), then closes the
// connection. Close during a reconnect connects once more to say it. Close
// is idempotent.
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
		cc.finishCarrying(goodbyeTimeout)
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
		case <-cc.moved:
			cc = s.current() // the run moved to another agent: follow it there
			continue
		case <-s.ctx.Done():
			return
		}
		if s.ctx.Err() != nil {
			return
		}
		select {
		case <-cc.moved:
			cc = s.current()
			continue
		default:
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
		s.restore(next, "reconnected")
		s.setCurrent(next)
		cc = next
	}
}

// move moves the run from old, whose agent is stopping, to another agent:
// a new connection (the agent's address reaches another replica once the
// stopping one no longer accepts), which serves the run's names again.
// old goes on carrying callers meanwhile, and afterwards until no caller
// has come to it for moveQuiet and the callers it carries have finished
// (from moveDrain to moveDrainMax after the move); then plug says moved on
// it and closes it. If no other agent answers within
// moveTimeout, plug says so on old (moved, naming no agent), which goes on
// carrying callers while the stopping agent gives the names back, then
// ends the run; the run reconnects as after any loss.
func (s *Session) move(old *clientConn) {
	s.event(Event{Kind: EventInfo, Text: "the agent is shutting down; moving the run to another agent…"})
	ctx, cancel := untilClosed(s.ctx, moveTimeout, old.gone)
	defer cancel()
	var next *clientConn
	for delay := 250 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		cc, err := s.dial(ctx)
		if err == nil {
			next = cc
			break
		}
		select {
		case <-ctx.Done():
			if !old.isGone() && s.ctx.Err() == nil {
				s.event(Event{Kind: EventWarning, Text: "could not move the run to another agent: " + err.Error() + "; the stopping agent gives the names back"})
				old.control.send(movedMsg{})
			}
			return
		case <-time.After(delay):
		}
	}
	s.restore(next, "moved to agent "+next.welcome.Agent)
	s.mu.Lock()
	if s.cur != old || old.isGone() || s.closed {
		s.mu.Unlock()
		next.conn.Close()
		return
	}
	s.cur = next
	s.changed.wake()
	close(old.moved)
	s.mu.Unlock()
	s.askNamesOn(next)

	old.drain(time.Now())
	old.control.send(movedMsg{Agent: next.welcome.Agent})
	old.conn.Close()
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

// restore asks for the run's names again on a new connection and says,
// after how (e.g. "reconnected"), which were kept.
func (s *Session) restore(cc *clientConn, how string) {
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
	text := how
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
		cc, changed, closed := s.cur, s.changed.next(), s.closed
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

// current is the live connection, nil while reconnecting.
func (s *Session) current() *clientConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

func (s *Session) setCurrent(cc *clientConn) {
	s.mu.Lock()
	s.cur = cc
	s.changed.wake()
	s.mu.Unlock()
	s.askNamesOn(cc)
}

func (s *Session) dropForward(f *forward) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.forwards[f.name] == f {
		delete(s.forwards, f.name)
	}
}

func (s *Session) lookupForward(name string, port int, udp bool) *forward {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.forwards[name]; f != nil && f.port == port && f.udp == udp {
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
