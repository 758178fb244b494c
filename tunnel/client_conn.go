package tunnel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
)

// clientConn is one SSH connection of a Session, from hello to its end.
type clientConn struct {
	s       *Session
	conn    ssh.Conn
	control *controlConn
	welcome welcomeMsg
	stripes *stripeTable // its striped connections (stripe.go)
	lanes   *laneSet     // its lanes, and its flows that use them (lanes.go)
	laning  sync.Once    // the lanes are being opened
	// measured is closed once a round trip of the connection is measured
	// (its first keepalive's answer).
	measured     chan struct{}
	measuredOnce sync.Once

	gone       chan struct{} // closed once the connection is closed and its control messages read
	readerDone chan struct{}
	bye        chan struct{} // closed when the agent acknowledged the goodbye
	byeOnce    sync.Once
	leaving    atomic.Bool   // the run said goodbye: catalogs still coming are not read
	namesOnce  sync.Once     // the catalog was asked for (Session.AskNames)
	ended      *endedMsg     // the agent ended the run; read after gone
	moved      chan struct{} // closed when the run moved to another connection (Session.move)
	carrying   atomic.Int32  // the callers being carried on this connection
	lastCaller atomic.Int64  // when the last caller came, in Unix nanoseconds

	pendingCatalog *pendingCatalog // a catalog or a change split over messages, until its last

	mu            sync.Mutex
	waiters       map[string]chan serveOutcome   // per name, for the answer to a tcpip-forward
	volumeWaiters map[string]chan volumeReadyMsg // per id, for the answer to a volume request
}

// serveOutcome is what the control channel said about a tcpip-forward.
type serveOutcome struct {
	served  Served
	refusal string // set when the agent refused
}

const (
	connectTimeout = 15 * time.Second
	// answerWait bounds the wait for the control message that accompanies a
	// tcpip-forward reply; it is sent before the reply, so it is normally
	// there already.
	answerWait = 2 * time.Second
)

// errConnLost means the connection broke under a request: the Session tries
// again on the next one.
var errConnLost = errors.New("the connection to the agent was lost")

// dial connects, authenticates, checks the pinned host key and says hello.
func (s *Session) dial(ctx context.Context) (*clientConn, error) {
	return s.dialAsking(ctx, nil)
}

// dialAsking is dial whose hello asks for asks, forwards of s not asked
// for yet (ClientConfig.Asks).
func (s *Session) dialAsking(ctx context.Context, asks []*forward) (*clientConn, error) {
	cfg := s.cfg
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	conn, chans, reqs, abort, err := s.handshake(ctx)
	if err != nil {
		return nil, err
	}
	cc := &clientConn{
		s:             s,
		conn:          conn,
		gone:          make(chan struct{}),
		readerDone:    make(chan struct{}),
		bye:           make(chan struct{}),
		moved:         make(chan struct{}),
		waiters:       map[string]chan serveOutcome{},
		volumeWaiters: map[string]chan volumeReadyMsg{},
		stripes:       stripeTableOf(conn, false),
		lanes:         newLaneSet(false),
		measured:      make(chan struct{}),
	}
	go cc.acceptChannels(chans)
	go answerRequests(reqs)
	cc.welcome, err = cc.hello(asks)
	if !abort() || ctx.Err() != nil {
		conn.Close()
		return nil, unreachable(cfg.Addr, context.DeadlineExceeded)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	cc.stripes.agree(cc.welcome.Stripes)
	if cc.welcome.LaneToken != "" {
		cc.lanes.agree(cc.welcome.Lanes)
	}
	if err := s.checkVersions(cc.welcome.Version); err != nil {
		cc.control.send(goodbyeMsg{})
		conn.Close()
		return nil, err
	}
	if !cc.welcome.Names {
		s.names.set(Catalog{Unavailable: fmt.Sprintf("the agent at %s (plug %s) does not tell the cluster's names; update the agent to consume them by name", cfg.Addr, cc.welcome.Version)})
	}
	go cc.readControl()
	go func() {
		conn.Wait()
		cc.lanes.close()
		<-cc.readerDone
		close(cc.gone)
	}()
	go keepAlive(conn, cfg.KeepAlive, cc.gone, func(d time.Duration) {
		cc.stripes.sawRTT(d)
		cc.measuredOnce.Do(func() { close(cc.measured) })
	})
	return cc, nil
}

// checkVersions refuses an agent of another major version than the CLI's
// (a *VersionError naming the update to run), and warns once per Session
// of one of another minor version.
func (s *Session) checkVersions(agent string) error {
	cli := s.cfg.Run.Version
	ok, says := Compatible(cli, agent, s.cfg.Profile)
	if !ok {
		return &VersionError{CLI: cli, Agent: agent, Says: says}
	}
	if cm, cmin, cok := releaseVersion(cli); cok {
		if am, amin, aok := releaseVersion(agent); aok && cm == am && cmin != amin {
			s.skewOnce.Do(func() { s.event(Event{Kind: EventWarning, Text: says}) })
		}
	}
	return nil
}

// handshakeOnce connects to the agent, checks its host key against the
// pinned one and authenticates; tune, if not nil, is first called with
// the connection the SSH connection will run on (a lane's: makeLane).
// Until abort is called, the connection is closed when ctx ends; abort
// reports whether that has not happened yet. A connection the agent
// closed before authentication was over is a *closedError.
func (s *Session) handshakeOnce(ctx context.Context, tune func(*batchConn)) (conn ssh.Conn, chans <-chan ssh.NewChannel, reqs <-chan *ssh.Request, abort func() bool, err error) {
	cfg := s.cfg
	var d net.Dialer
	dialled, err := d.DialContext(ctx, "tcp", cfg.Addr)
	if err != nil {
		return nil, nil, nil, nil, unreachable(cfg.Addr, err)
	}
	batched := newBatchConn(dialled)
	if tune != nil {
		tune(batched)
	}
	raw := &headConn{Conn: batched}
	abort = context.AfterFunc(ctx, func() { raw.Close() })
	var banner strings.Builder
	sshConfig := &ssh.ClientConfig{
		Config:          strongAlgorithms(),
		User:            cfg.User,
		HostKeyCallback: s.checkHostKey,
		BannerCallback: func(msg string) error {
			if banner.Len() < maxTextField {
				banner.WriteString(msg)
			}
			return nil
		},
		ClientVersion: "SSH-2.0-plug_" + sshVersionWord(cfg.Run.Version),
	}
	if cfg.Signer != nil { // without one, only "none", which the get user takes
		sshConfig.Auth = []ssh.AuthMethod{ssh.PublicKeys(cfg.Signer)}
	}
	if cfg.HostKey.Type() == ssh.KeyAlgoED25519 {
		sshConfig.HostKeyAlgorithms = []string{ssh.KeyAlgoED25519}
	}
	conn, chans, reqs, err = ssh.NewClientConn(raw, cfg.Addr, sshConfig)
	if err != nil {
		abort()
		if closed := closedEarly(cfg.Addr, err, raw.first()); closed != nil && ctx.Err() == nil {
			return nil, nil, nil, nil, closed
		}
		return nil, nil, nil, nil, s.handshakeError(ctx, err, banner.String())
	}
	return conn, chans, reqs, abort, nil
}

func (s *Session) checkHostKey(_ string, _ net.Addr, key ssh.PublicKey) error {
	if bytes.Equal(key.Marshal(), s.cfg.HostKey.Marshal()) {
		return nil
	}
	return &HostKeyError{
		Addr:       s.cfg.Addr,
		Profile:    s.cfg.Profile,
		Pinned:     ssh.FingerprintSHA256(s.cfg.HostKey),
		Offered:    ssh.FingerprintSHA256(key),
		OfferedKey: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key))),
	}
}

// handshakeError explains a failed SSH handshake. x/crypto reports a
// refused key only in words: "unable to authenticate".
func (s *Session) handshakeError(ctx context.Context, err error, banner string) error {
	var hostKey *HostKeyError
	switch {
	case errors.As(err, &hostKey):
		return hostKey
	case strings.Contains(err.Error(), "unable to authenticate"):
		return &AuthError{
			Addr:        s.cfg.Addr,
			User:        s.cfg.User,
			Profile:     s.cfg.Profile,
			Fingerprint: ssh.FingerprintSHA256(s.cfg.Signer.PublicKey()),
			Reason:      printableLines(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(banner), "plug agent:"))),
		}
	case ctx.Err() != nil:
		return unreachable(s.cfg.Addr, ctx.Err())
	}
	return &UnreachableError{Addr: s.cfg.Addr, Reason: "no plug agent answered there (" + err.Error() + ")", Err: err}
}

// hello opens the control channel, says hello and reads the welcome. The
// hello, asking for asks, goes with the channel's open, and again on the
// channel once it is open, for an agent that does not read the open's
// data. An agent whose welcome says it did not (HelloAtOpen) is asked for
// none of them: they are taken out of the session's forwards, for Serve to
// ask for.
func (cc *clientConn) hello(asks []*forward) (welcome welcomeMsg, err error) {
	addr := cc.s.cfg.Addr
	run := cc.s.cfg.Run
	kind := kindConsumes
	if run.Serves {
		kind = kindServes
	}
	h := helloMsg{Run: run.ID, Version: run.Version, Kind: kind, OS: runtime.GOOS, Arch: runtime.GOARCH, Comment: run.Comment, Container: run.Container, Stripes: maxStripes, Lanes: maxLanes, Deltas: true, Forms: true,
		NamesWhenAsked: cc.s.cfg.NamesWhenAsked && !cc.s.namesAsked.Load()}
	for _, f := range asks {
		a := askedServe{Name: f.name, Port: f.port, UDP: f.udp}
		if !f.filter.Empty() {
			a.Filter = &f.filter
		}
		h.Serves = append(h.Serves, a)
	}
	frame, err := encodeFrame(h)
	if err != nil || len(asks) > maxAskedServes { // more than one hello takes: asked for one by one
		cc.unask(asks)
		h.Serves, asks = nil, nil
		if frame, err = encodeFrame(h); err != nil {
			return welcomeMsg{}, err
		}
	}
	cc.ask(asks)
	defer func() {
		if err != nil || !welcome.HelloAtOpen {
			cc.unask(asks)
		}
	}()
	ch, reqs, err := cc.conn.OpenChannel(controlChannelType, frame)
	if err != nil {
		return welcomeMsg{}, &UnreachableError{Addr: addr, Reason: "the server there is not a plug agent: " + err.Error(), Err: err}
	}
	go ssh.DiscardRequests(reqs)
	cc.control = &controlConn{rw: ch}
	if err := cc.control.write(frame); err != nil {
		return welcomeMsg{}, unreachable(addr, err)
	}
	typ, frame, err := cc.control.receive()
	if err != nil {
		return welcomeMsg{}, unreachable(addr, err)
	}
	switch typ {
	case typeWelcome:
		return decodeMsg[welcomeMsg](frame)
	case typeEnded:
		m, err := decodeMsg[endedMsg](frame)
		if err != nil {
			return welcomeMsg{}, err
		}
		if m.Retry {
			return welcomeMsg{}, &UnreachableError{Addr: addr, Reason: m.Reason}
		}
		return welcomeMsg{}, &EndedError{By: m.By, Reason: m.Reason}
	}
	return welcomeMsg{}, fmt.Errorf("the agent at %s answered hello with %q", addr, typ)
}

// readControl handles the agent's control messages until the channel ends.
func (cc *clientConn) readControl() {
	defer close(cc.readerDone)
	for {
		typ, frame, err := cc.control.receive()
		if err == nil {
			err = cc.handleControl(typ, frame)
		}
		if err != nil {
			cc.conn.Close()
			return
		}
	}
}

func (cc *clientConn) handleControl(typ string, frame []byte) error {
	s := cc.s
	switch typ {
	case typeServed:
		m, err := decodeMsg[servedMsg](frame)
		if err != nil {
			return err
		}
		served := Served{TookOver: m.TookOver, Detail: m.Detail}
		if !cc.answer(m.Name, serveOutcome{served: served}) {
			s.event(Event{Name: m.Name, Kind: EventInfo, Text: servedLine(m.Name, m.Port, m.UDP, served)})
		}
	case typeEvent:
		m, err := decodeMsg[eventMsg](frame)
		if err != nil {
			return err
		}
		if m.Kind == string(EventRefused) && m.Name != "" && cc.answer(m.Name, serveOutcome{refusal: m.Text}) {
			return nil
		}
		s.event(Event{Name: m.Name, Kind: EventKind(m.Kind), Text: m.Text})
	case typeEnded:
		m, err := decodeMsg[endedMsg](frame)
		if err != nil {
			return err
		}
		if m.Move {
			go s.move(cc)
			return nil
		}
		cc.ended = &m
		if !m.Retry {
			s.event(Event{Kind: EventEnded, Text: (&EndedError{By: m.By, Reason: m.Reason}).Error()})
		}
		// The agent gave the names back before it said so: no caller comes
		// any more, and those carried are let finish.
		go func() {
			cc.finishCarrying(goodbyeTimeout)
			cc.conn.Close()
		}()
	case typeGoodbye:
		cc.byeOnce.Do(func() { close(cc.bye) })
	case typeVolumeReady:
		return handleMsg(frame, decodeMsg[volumeReadyMsg], cc.volumeReady)
	case typeCatalog:
		if cc.leaving.Load() {
			return nil // what the cluster holds no longer matters to the run
		}
		return handleMsg(frame, decodeMsg[catalogMsg], cc.takeCatalog)
	}
	return nil
}

// answer hands a control message about name to the request waiting for it.
func (cc *clientConn) answer(name string, o serveOutcome) bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	w := cc.waiters[name]
	if w == nil {
		return false
	}
	select {
	case w <- o:
	default:
	}
	return true
}

// awaitAnswer puts a channel for the one answer to key into waiters, which
// mu guards, and returns it with the func that takes it out again.
func awaitAnswer[T any](mu *sync.Mutex, waiters map[string]chan T, key string) (chan T, func()) {
	ch := make(chan T, 1)
	mu.Lock()
	waiters[key] = ch
	mu.Unlock()
	return ch, func() {
		mu.Lock()
		delete(waiters, key)
		mu.Unlock()
	}
}

// requestForward sends tcpip-forward for f and returns what the agent
// answered. errConnLost if the connection broke first.
func (cc *clientConn) requestForward(ctx context.Context, f *forward) (Served, error) {
	answer, done := awaitAnswer(&cc.mu, cc.waiters, f.name)
	defer done()

	reqType, payload := "tcpip-forward", ssh.Marshal(forwardRequest{Addr: f.name, Port: uint32(f.port)})
	if !f.filter.Empty() {
		if !cc.welcome.Filters {
			return Served{}, &ServeError{Name: f.name, Port: f.port, UDP: f.udp, Reason: fmt.Sprintf(
				"the agent (plug %s) does not route requests by header or path; update the agent, or serve without --header and --path (a full takeover)", PeerText(cc.welcome.Version))}
		}
		text, _ := json.Marshal(f.filter) // a Filter always marshals
		reqType, payload = filteredForwardRequest, ssh.Marshal(filteredForward{Addr: f.name, Port: uint32(f.port), Filter: string(text)})
	}
	if f.udp {
		if !cc.welcome.UDPServe {
			return Served{}, &ServeError{Name: f.name, Port: f.port, UDP: f.udp, Reason: fmt.Sprintf("the agent (plug %s) does not serve UDP ports; update the agent", PeerText(cc.welcome.Version))}
		}
		reqType = datagramForwardRequest
	}
	type reply struct {
		ok  bool
		err error
	}
	replied := make(chan reply, 1)
	go func() {
		ok, _, err := cc.conn.SendRequest(reqType, true, payload)
		replied <- reply{ok, err}
	}()
	var r reply
	select {
	case r = <-replied:
	case <-ctx.Done():
		// Give the name back if the agent serves it after all.
		go func() {
			if r := <-replied; r.ok {
				cc.cancelForward(f)
			}
		}()
		return Served{}, ctx.Err()
	}
	if r.err != nil {
		return Served{}, errConnLost
	}
	var o serveOutcome
	select {
	case o = <-answer:
	case <-time.After(answerWait):
	}
	if r.ok {
		return o.served, nil
	}
	if o.refusal == "" {
		o.refusal = "the agent refused it without saying why"
	}
	return o.result(f)
}

// result is what Serve returns for f when the agent answered o.
func (o serveOutcome) result(f *forward) (Served, error) {
	if o.refusal != "" {
		return Served{}, &ServeError{Name: f.name, Port: f.port, UDP: f.udp, Reason: o.refusal}
	}
	return o.served, nil
}

// cancelForward asks the agent to give f back: a Serve given up on that
// the agent served all the same.
func (cc *clientConn) cancelForward(f *forward) {
	typ := "cancel-tcpip-forward"
	if f.udp {
		typ = cancelDatagramForward
	}
	cc.conn.SendRequest(typ, false, ssh.Marshal(forwardRequest{Addr: f.name, Port: uint32(f.port)}))
}

// dial opens a channel of chanType (direct-tcpip, datagramChannelType, or
// stripeDirectType as the first channel of st) to host:port through the
// agent.
func (cc *clientConn) dial(ctx context.Context, chanType, host string, port int, id uint32) (*channelConn, error) {
	address := net.JoinHostPort(host, fmt.Sprint(port))
	payload := ssh.Marshal(directChannel{Host: host, Port: uint32(port), Origin: "127.0.0.1"})
	if id != 0 {
		payload = ssh.Marshal(stripeOpen{ID: id, Rest: payload})
	}
	type opened struct {
		ch  ssh.Channel
		err error
	}
	result := make(chan opened, 1)
	go func() {
		ch, reqs, err := cc.conn.OpenChannel(chanType, payload)
		if err == nil {
			go ssh.DiscardRequests(reqs)
		}
		result <- opened{ch, err}
	}()
	select {
	case o := <-result:
		var refused *ssh.OpenChannelError
		switch {
		case errors.As(o.err, &refused):
			return nil, &DialError{Address: address, Reason: printable(refused.Message)}
		case o.err != nil:
			return nil, errConnLost
		}
		return &channelConn{Channel: o.ch, remote: tunnelAddr(address)}, nil
	case <-ctx.Done():
		go func() {
			if o := <-result; o.err == nil {
				o.ch.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// sayGoodbye tells the agent the run ends and waits until it has given the
// names back; the catalog messages read meanwhile are dropped undecoded.
func (cc *clientConn) sayGoodbye() {
	cc.leaving.Store(true)
	if cc.control.send(goodbyeMsg{}) != nil {
		return
	}
	select {
	case <-cc.bye:
	case <-cc.gone:
	case <-time.After(goodbyeTimeout):
	}
}

// finishCarrying returns once the connection carries no caller, or after
// within.
func (cc *clientConn) finishCarrying(within time.Duration) {
	deadline := time.Now().Add(within)
	for cc.carrying.Load() > 0 && time.Now().Before(deadline) && !cc.isGone() {
		time.Sleep(20 * time.Millisecond)
	}
}

// drain returns once the connection, which its run has left (Session.move)
// at since, has had no caller for moveQuiet and carries none, but not
// before moveDrain after since, and at moveDrainMax after since at the
// latest.
func (cc *clientConn) drain(since time.Time) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for now := range tick.C {
		quiet := now.Sub(time.Unix(0, cc.lastCaller.Load())) >= moveQuiet && cc.carrying.Load() == 0
		if (quiet && now.Sub(since) >= moveDrain) || now.Sub(since) >= moveDrainMax || cc.isGone() {
			return
		}
	}
}

func (cc *clientConn) isGone() bool { return isClosed(cc.gone) }

// acceptChannels takes the agent's forwarded-tcpip and stripeForwardedType
// channels, callers of the run's names, its forwarded-datagram channels,
// flows to them, and the channels the agent adds to striped connections.
func (cc *clientConn) acceptChannels(chans <-chan ssh.NewChannel) {
	for nc := range chans {
		take := func(nc ssh.NewChannel) { cc.s.forwarded(nc, cc.stripes) }
		switch nc.ChannelType() {
		case "forwarded-tcpip", stripeForwardedType:
		case forwardedDatagramType, forwardedLanedType:
			take = func(nc ssh.NewChannel) { cc.s.forwardedDatagrams(nc, cc) }
		case stripeJoinType:
			go cc.stripes.join(nc)
			continue
		default:
			nc.Reject(ssh.UnknownChannelType, "the plug CLI opens no "+nc.ChannelType()+" channels")
			continue
		}
		cc.carrying.Add(1)
		cc.lastCaller.Store(time.Now().UnixNano())
		go func() {
			defer cc.carrying.Add(-1)
			take(nc)
		}()
	}
}

// forwarded joins a caller of a served name to the local address, on a
// plain channel or as a striped connection of stripes. When
// nothing answers there, the channel is refused, and the agent sends the
// caller to what the name reached before the run (or refuses it); the
// developer is told once, but not while the process may still be starting
// (localStartGrace after the name was served, until it first answers).
func (s *Session) forwarded(nc ssh.NewChannel, stripes *stripeTable) {
	var m forwardedChannel
	id, striped, ok := openPayload(nc, stripeForwardedType, &m)
	if !ok {
		return
	}
	f := s.lookupForward(m.Addr, int(m.Port), false)
	if f == nil {
		nc.Reject(ssh.Prohibited, fmt.Sprintf("this run does not serve %s:%d", m.Addr, m.Port))
		return
	}
	dialled, err := net.DialTimeout("tcp", f.local, localDialTimeout)
	if err != nil {
		nc.Reject(ssh.ConnectionFailed, "nothing answers on "+f.local+" on the developer's machine")
		if (f.answered.Load() || time.Since(f.since) > localStartGrace) && !f.failing.Swap(true) {
			s.event(Event{Name: f.name, Kind: EventWarning, Text: fmt.Sprintf("%s:%d was called, but nothing answers on %s; its callers go to the deployed service meanwhile, if there is one", f.name, f.port, f.local)})
		}
		return
	}
	local := rawIO(dialled)
	f.answered.Store(true)
	if f.failing.Swap(false) {
		s.event(Event{Name: f.name, Kind: EventHealed, Text: fmt.Sprintf("%s answers %s:%d again", f.local, f.name, f.port)})
	}
	if striped {
		stripes.carryFirst(nc, id, local)
		return
	}
	if ch, ok := acceptFor(nc, local); ok {
		pipe(ch, local)
	}
}

// channelConn is a direct-tcpip channel as a net.Conn.
var _ net.Conn = (*channelConn)(nil)

type channelConn struct {
	ssh.Channel
	remote net.Addr
	cc     *clientConn // the connection of a flow opened with an id (lanes.go)
	flow   uint32      // that id; 0: none
}

var errNoDeadline = errors.New("connections through the plug agent have no deadlines")

func (c *channelConn) LocalAddr() net.Addr                { return tunnelAddr("plug") }
func (c *channelConn) RemoteAddr() net.Addr               { return c.remote }
func (c *channelConn) SetDeadline(t time.Time) error      { return errNoDeadline }
func (c *channelConn) SetReadDeadline(t time.Time) error  { return errNoDeadline }
func (c *channelConn) SetWriteDeadline(t time.Time) error { return errNoDeadline }

// tunnelAddr is an address reached through the agent.
type tunnelAddr string

func (a tunnelAddr) Network() string { return "plug" }
func (a tunnelAddr) String() string  { return string(a) }

func joinSorted(items []string) string {
	sort.Strings(items)
	return strings.Join(items, ", ")
}
