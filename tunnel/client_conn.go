package tunnel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// clientConn is one SSH connection of a Session, from hello to its end.
type clientConn struct {
	s       *Session
	conn    ssh.Conn
	control *controlConn
	welcome welcomeMsg

	gone       chan struct{} // closed once the connection is closed and its control messages read
	readerDone chan struct{}
	bye        chan struct{} // closed when the agent acknowledged the goodbye
	byeOnce    sync.Once
	ended      *endedMsg // the agent ended the run; read after gone

	pendingCatalog *Catalog // a catalog split over messages, until its last
	catalogFull    bool     // the pending catalog reached maxCatalogNames

	mu      sync.Mutex
	waiters map[string]chan serveOutcome // per name, for the answer to a tcpip-forward
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
	cfg := s.cfg
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	conn, chans, reqs, abort, err := s.handshake(ctx)
	if err != nil {
		return nil, err
	}
	cc := &clientConn{
		s:          s,
		conn:       conn,
		gone:       make(chan struct{}),
		readerDone: make(chan struct{}),
		bye:        make(chan struct{}),
		waiters:    map[string]chan serveOutcome{},
	}
	go cc.acceptChannels(chans)
	go answerRequests(reqs)
	cc.welcome, err = cc.hello()
	if !abort() || ctx.Err() != nil {
		conn.Close()
		return nil, unreachable(cfg.Addr, context.DeadlineExceeded)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	if !cc.welcome.Names {
		s.names.set(Catalog{Unavailable: fmt.Sprintf("the agent at %s (plug %s) does not tell the cluster's names; update the agent to consume them by name", cfg.Addr, cc.welcome.Version)})
	}
	go cc.readControl()
	go func() {
		conn.Wait()
		<-cc.readerDone
		close(cc.gone)
	}()
	go keepAlive(conn, cfg.KeepAlive, cc.gone)
	return cc, nil
}

// handshake connects to the agent, checks its host key against the pinned
// one and authenticates. Until abort is called, the connection is closed
// when ctx ends; abort reports whether that has not happened yet.
func (s *Session) handshake(ctx context.Context) (conn ssh.Conn, chans <-chan ssh.NewChannel, reqs <-chan *ssh.Request, abort func() bool, err error) {
	cfg := s.cfg
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", cfg.Addr)
	if err != nil {
		return nil, nil, nil, nil, unreachable(cfg.Addr, err)
	}
	abort = context.AfterFunc(ctx, func() { raw.Close() })
	var banner strings.Builder
	sshConfig := &ssh.ClientConfig{
		User:            cfg.User,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(cfg.Signer)},
		HostKeyCallback: s.checkHostKey,
		BannerCallback: func(msg string) error {
			if banner.Len() < maxTextField {
				banner.WriteString(msg)
			}
			return nil
		},
		ClientVersion: "SSH-2.0-plug_" + sshVersionWord(cfg.Run.Version),
	}
	if cfg.HostKey.Type() == ssh.KeyAlgoED25519 {
		sshConfig.HostKeyAlgorithms = []string{ssh.KeyAlgoED25519}
	}
	conn, chans, reqs, err = ssh.NewClientConn(raw, cfg.Addr, sshConfig)
	if err != nil {
		abort()
		return nil, nil, nil, nil, s.handshakeError(ctx, err, banner.String())
	}
	return conn, chans, reqs, abort, nil
}

func (s *Session) checkHostKey(_ string, _ net.Addr, key ssh.PublicKey) error {
	if bytes.Equal(key.Marshal(), s.cfg.HostKey.Marshal()) {
		return nil
	}
	return &HostKeyError{
		Addr:    s.cfg.Addr,
		Profile: s.cfg.Profile,
		Pinned:  ssh.FingerprintSHA256(s.cfg.HostKey),
		Offered: ssh.FingerprintSHA256(key),
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
			Reason:      printable(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(banner), "plug agent:"))),
		}
	case ctx.Err() != nil:
		return unreachable(s.cfg.Addr, ctx.Err())
	}
	return &UnreachableError{Addr: s.cfg.Addr, Reason: "no plug agent answered there (" + err.Error() + ")", Err: err}
}

// hello opens the control channel, says hello and reads the welcome.
func (cc *clientConn) hello() (welcomeMsg, error) {
	addr := cc.s.cfg.Addr
	ch, reqs, err := cc.conn.OpenChannel(controlChannelType, nil)
	if err != nil {
		return welcomeMsg{}, &UnreachableError{Addr: addr, Reason: "the server there is not a plug agent: " + err.Error(), Err: err}
	}
	go ssh.DiscardRequests(reqs)
	cc.control = &controlConn{rw: ch}
	run := cc.s.cfg.Run
	kind := kindConsumes
	if run.Serves {
		kind = kindServes
	}
	h := helloMsg{Run: run.ID, Version: run.Version, Kind: kind, OS: runtime.GOOS, Arch: runtime.GOARCH}
	if err := cc.control.send(h); err != nil {
		return welcomeMsg{}, unreachable(addr, err)
	}
	typ, frame, err := cc.control.receive()
	if err != nil {
		return welcomeMsg{}, unreachable(addr, err)
	}
	switch typ {
	case typeWelcome:
		return decodeWelcome(frame)
	case typeEnded:
		m, err := decodeEnded(frame)
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
		m, err := decodeServed(frame)
		if err != nil {
			return err
		}
		served := Served{TookOver: m.TookOver, Detail: m.Detail}
		if !cc.answer(m.Name, serveOutcome{served: served}) {
			s.event(Event{Name: m.Name, Kind: EventInfo, Text: servedLine(m.Name, m.Port, served)})
		}
	case typeEvent:
		m, err := decodeEvent(frame)
		if err != nil {
			return err
		}
		if m.Kind == string(EventRefused) && m.Name != "" && cc.answer(m.Name, serveOutcome{refusal: m.Text}) {
			return nil
		}
		s.event(Event{Name: m.Name, Kind: EventKind(m.Kind), Text: m.Text})
	case typeEnded:
		m, err := decodeEnded(frame)
		if err != nil {
			return err
		}
		cc.ended = &m
		if !m.Retry {
			s.event(Event{Kind: EventEnded, Text: (&EndedError{By: m.By, Reason: m.Reason}).Error()})
		}
		cc.conn.Close()
	case typeGoodbye:
		cc.byeOnce.Do(func() { close(cc.bye) })
	case typeCatalog:
		m, err := decodeCatalog(frame)
		if err != nil {
			return err
		}
		cc.takeCatalog(m)
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

// requestForward sends tcpip-forward for f and returns what the agent
// answered. errConnLost if the connection broke first.
func (cc *clientConn) requestForward(ctx context.Context, f *forward) (Served, error) {
	answer := make(chan serveOutcome, 1)
	cc.mu.Lock()
	cc.waiters[f.name] = answer
	cc.mu.Unlock()
	defer func() {
		cc.mu.Lock()
		delete(cc.waiters, f.name)
		cc.mu.Unlock()
	}()

	payload := ssh.Marshal(forwardRequest{Addr: f.name, Port: uint32(f.port)})
	type reply struct {
		ok  bool
		err error
	}
	replied := make(chan reply, 1)
	go func() {
		ok, _, err := cc.conn.SendRequest("tcpip-forward", true, payload)
		replied <- reply{ok, err}
	}()
	var r reply
	select {
	case r = <-replied:
	case <-ctx.Done():
		// Give the name back if the agent serves it after all.
		go func() {
			if r := <-replied; r.ok {
				cc.conn.SendRequest("cancel-tcpip-forward", false, payload)
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
	if !r.ok {
		if o.refusal == "" {
			o.refusal = "the agent refused it without saying why"
		}
		return Served{}, &ServeError{Name: f.name, Port: f.port, Reason: o.refusal}
	}
	return o.served, nil
}

// dial opens a direct-tcpip channel to host:port through the agent.
func (cc *clientConn) dial(ctx context.Context, host string, port int) (net.Conn, error) {
	address := net.JoinHostPort(host, fmt.Sprint(port))
	payload := ssh.Marshal(directChannel{Host: host, Port: uint32(port), Origin: "127.0.0.1"})
	type opened struct {
		ch  ssh.Channel
		err error
	}
	result := make(chan opened, 1)
	go func() {
		ch, reqs, err := cc.conn.OpenChannel("direct-tcpip", payload)
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
// names back.
func (cc *clientConn) sayGoodbye() {
	if cc.control.send(goodbyeMsg{}) != nil {
		return
	}
	select {
	case <-cc.bye:
	case <-cc.gone:
	case <-time.After(goodbyeTimeout):
	}
}

func (cc *clientConn) isGone() bool {
	select {
	case <-cc.gone:
		return true
	default:
		return false
	}
}

// acceptChannels takes the agent's forwarded-tcpip channels: callers of the
// run's names.
func (cc *clientConn) acceptChannels(chans <-chan ssh.NewChannel) {
	for nc := range chans {
		if nc.ChannelType() != "forwarded-tcpip" {
			nc.Reject(ssh.UnknownChannelType, "the plug CLI opens no "+nc.ChannelType()+" channels")
			continue
		}
		go cc.s.forwarded(nc)
	}
}

// forwarded joins a caller of a served name to the local address.
func (s *Session) forwarded(nc ssh.NewChannel) {
	var m forwardedChannel
	if err := ssh.Unmarshal(nc.ExtraData(), &m); err != nil {
		nc.Reject(ssh.ConnectionFailed, "malformed forwarded-tcpip channel")
		return
	}
	f := s.lookupForward(m.Addr, int(m.Port))
	if f == nil {
		nc.Reject(ssh.Prohibited, fmt.Sprintf("this run does not serve %s:%d", m.Addr, m.Port))
		return
	}
	local, err := net.DialTimeout("tcp", f.local, localDialTimeout)
	if err != nil {
		nc.Reject(ssh.ConnectionFailed, "nothing answers on "+f.local+" on the developer's machine")
		if !f.failing.Swap(true) {
			s.event(Event{Name: f.name, Kind: EventWarning, Text: fmt.Sprintf("%s:%d was called, but nothing answers on %s", f.name, f.port, f.local)})
		}
		return
	}
	if f.failing.Swap(false) {
		s.event(Event{Name: f.name, Kind: EventHealed, Text: fmt.Sprintf("%s answers %s:%d again", f.local, f.name, f.port)})
	}
	ch, reqs, err := nc.Accept()
	if err != nil {
		local.Close()
		return
	}
	go ssh.DiscardRequests(reqs)
	pipe(ch, local)
}

// channelConn is a direct-tcpip channel as a net.Conn.
var _ net.Conn = (*channelConn)(nil)

type channelConn struct {
	ssh.Channel
	remote net.Addr
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
