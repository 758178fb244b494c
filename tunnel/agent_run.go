package tunnel

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
)

// run is one plug run: a CLI process, or a plain OpenSSH connection, and the
// names it serves. A run outlives a dropped connection for the agent's Grace,
// so that the CLI can reconnect and keep its names.
type run struct {
	id        string
	developer string        // fingerprint of the key, "SHA256:..."
	key       ssh.PublicKey // the key itself, for Keys.Admit
	user      string
	plain     bool // opened without a hello: nothing can re-attach to it
	since     time.Time
	hello     helloMsg // what the client said of itself (Kind KindOpenSSH when plain)
	from      string   // the address of its latest connection; guarded by mu

	conn atomic.Pointer[devConn] // the connection it lives on; nil while detached

	mu       sync.Mutex
	ended    bool
	bindings map[string]*binding
	volumes  map[string]*Volume // by the CLI's id; an empty Volume while its helper is made
	grace    *time.Timer
}

// binding is a name a run serves, and the listener the platform sends its
// callers to: a TCP listener, or for a UDP port the flows of a UDP socket.
type binding struct {
	Binding
	served    Served
	since     time.Time          // when this run began serving it
	listener  net.Listener       // nil for a UDP port
	flows     *DatagramFlows     // the UDP port's; nil for a TCP port
	proof     *pathProof         // proves the name reaches listener; nil for a UDP port
	stopProof context.CancelFunc // ends the proof when the name is given back
	// conn is where callers are forwarded; nil while the run's client has
	// not (re-)claimed the name, and while the name is given back: callers
	// then go to the deployed service, or are refused (answerCaller).
	conn      atomic.Pointer[devConn]
	givenBack atomic.Bool  // Release has returned: the listener only drains
	route     atomic.Int32 // where the last caller went, so that a change is logged once

	// A personal takeover's: the requests it matches reach the run, through
	// the front its name's personal takeovers share on this agent (whose
	// listener it is); nil for a full takeover.
	match *matcher
	front *front
	run   runTransports // the run's HTTP clients, made on first use
}

// Where a binding's callers go.
const (
	routeRun int32 = iota + 1
	routeDeployed
	routeRefused
)

// ending says why a run ends.
type ending struct {
	how        string // EndGoodbye...: how the audit says it ended
	by, reason string
	retry      bool   // the agent is only going away: the client should reconnect
	goodbye    bool   // the client said goodbye: acknowledge once the names are back
	ifDetached bool   // only if no connection re-attached meanwhile (grace expiry)
	movedTo    string // the run moved to this agent, which serves its names now
}

var errAgentStopping = errors.New("the agent is shutting down; try again in a moment")

// newRun registers a run living on dc, which said h of itself (plain: it
// said nothing). It fails once the agent is shutting down
// (errAgentStopping), when another key holds a run of that id here
// (errOtherKeysRun), and when the key has as many runs as it may (a
// *capError).
func (a *Agent) newRun(h helloMsg, dc *devConn, plain bool) (*run, error) {
	if plain {
		h.Kind = KindOpenSSH
	}
	r := &run{
		id:        h.Run,
		developer: dc.fingerprint,
		key:       dc.key,
		user:      dc.user,
		plain:     plain,
		since:     time.Now(),
		hello:     h,
		from:      dc.conn.RemoteAddr().String(),
		bindings:  map[string]*binding{},
		volumes:   map[string]*Volume{},
	}
	r.conn.Store(dc)
	a.mu.Lock()
	if a.closing {
		a.mu.Unlock()
		return nil, errAgentStopping
	}
	if old := a.runs[r.id]; old != nil && old.developer != r.developer {
		a.mu.Unlock()
		return nil, errOtherKeysRun
	}
	if err := a.usage.take(r.developer, useRun); err != nil {
		a.mu.Unlock()
		a.plog.printf(r.developer, "refused a run of %s (%s) from %s: %v", r.user, r.developer, dc.conn.RemoteAddr(), err)
		return nil, err
	}
	a.runs[r.id] = r
	a.mu.Unlock()
	a.recorder.note(r)
	a.audit(AuditEvent{Event: AuditRunOpened, Run: r.id, User: r.user, Key: r.developer, Comment: h.Comment,
		From: dc.conn.RemoteAddr().String(), Version: h.Version, Kind: h.Kind, Container: h.Container})
	return r, nil
}

// attach gives dc the run its hello names: the run kept since an earlier
// connection of the same key (resumed), or a new one, which may be a run
// moving here from another replica. A run belongs to the key that opened
// it: a hello of another key naming its id, here or on any replica whose
// records say so, is refused and changes nothing.
func (a *Agent) attach(dc *devConn, h helloMsg) (r *run, resumed bool, err error) {
	a.mu.Lock()
	r = a.runs[h.Run]
	a.mu.Unlock()
	if r != nil {
		if resumed, err = r.reattach(dc); err != nil || resumed {
			if resumed {
				a.audit(AuditEvent{Event: AuditRunResumed, Run: r.id, User: r.user, Key: r.developer, From: dc.conn.RemoteAddr().String()})
			}
			return r, resumed, err
		}
	}
	if err := a.checkRunOwner(dc, h.Run); err != nil {
		return nil, false, err
	}
	r, err = a.newRun(h, dc, false)
	return r, false, err
}

// reattach moves the run to dc, closing the connection it lived on if that
// one is still open (a client that reconnects knows better than a TCP
// connection that has not noticed it is dead). False if the run has ended.
func (r *run) reattach(dc *devConn) (bool, error) {
	r.mu.Lock()
	if r.ended {
		r.mu.Unlock()
		return false, nil
	}
	if r.developer != dc.fingerprint {
		r.mu.Unlock()
		return false, errOtherKeysRun
	}
	old := r.conn.Swap(dc)
	r.from = dc.conn.RemoteAddr().String()
	if r.grace != nil {
		r.grace.Stop()
		r.grace = nil
	}
	r.mu.Unlock()
	dc.a.recorder.note(r)
	if old != nil && old != dc {
		old.conn.Close()
	}
	return true, nil
}

// detach is called when dc is closed: its run keeps its names for Grace,
// or ends at once if nothing could re-attach to it or it serves nothing
// (no name, no volume).
func (a *Agent) detach(dc *devConn, r *run) {
	a.mu.Lock()
	closing := a.closing // shutdown ends every run itself (handOver)
	a.mu.Unlock()
	r.mu.Lock()
	if r.ended || !r.conn.CompareAndSwap(dc, nil) {
		r.mu.Unlock()
		return
	}
	for _, b := range r.bindings {
		b.conn.CompareAndSwap(dc, nil)
	}
	if closing {
		r.mu.Unlock()
		return
	}
	if r.plain || len(r.bindings) == 0 && len(r.volumes) == 0 {
		r.mu.Unlock()
		a.endRun(r, ending{how: EndDropped, reason: "the connection was lost"})
		return
	}
	r.grace = time.AfterFunc(a.Grace, func() { a.expire(r) })
	away := a.awayRoutes(r.bindings)
	r.mu.Unlock()
	a.recorder.note(r)
	a.audit(AuditEvent{Event: AuditRunAway, Run: r.id, User: r.user, Key: r.developer, Reason: away})
	a.plog.printf(r.developer, "run %s dropped; it is away, keeping %s for %s; meanwhile %s", r.id, r.names(), a.Grace, away)
}

// awayRoutes says where the callers of bindings go while their run is
// away.
func (a *Agent) awayRoutes(bindings map[string]*binding) string {
	_, dials := a.Platform.(DeployedDialer)
	var lines []string
	for _, b := range bindings {
		if b.UDP {
			lines = append(lines, fmt.Sprintf("datagrams to %s:%d/udp are dropped", b.Name, b.Port))
			continue
		}
		if b.served.TookOver && dials {
			lines = append(lines, fmt.Sprintf("callers of %s:%d go to the deployed service", b.Name, b.Port))
		} else {
			lines = append(lines, fmt.Sprintf("callers of %s:%d are refused at once", b.Name, b.Port))
		}
	}
	return joinSorted(lines)
}

// expire ends a run whose grace ran out without a reconnect.
func (a *Agent) expire(r *run) {
	a.endRun(r, ending{how: EndDropped, reason: "the connection was lost and did not come back within " + a.Grace.String(), ifDetached: true})
}

// EndRun ends the run id: the developer's CLI is told by whom and why, its
// names are given back at once, and its connection is closed. A new run of
// the same key is let in afterwards.
func (a *Agent) EndRun(id, by, reason string) error {
	a.mu.Lock()
	r := a.runs[id]
	a.mu.Unlock()
	if r == nil {
		return fmt.Errorf("no run %s on this agent", id)
	}
	a.endRun(r, ending{how: EndEnded, by: PeerText(by), reason: PeerText(reason)})
	return nil
}

// endRun ends r once: it gives back every name first, whatever the client
// does, then tells the connection why and closes it, or acknowledges the
// goodbye.
func (a *Agent) endRun(r *run, e ending) {
	r.mu.Lock()
	if r.ended || (e.ifDetached && r.conn.Load() != nil) {
		r.mu.Unlock()
		return
	}
	r.ended = true
	if r.grace != nil {
		r.grace.Stop()
	}
	bindings := r.bindings
	r.bindings = nil
	volumes := r.volumes
	r.volumes = nil
	r.mu.Unlock()

	a.mu.Lock()
	if a.runs[r.id] == r {
		delete(a.runs, r.id)
	}
	a.mu.Unlock()
	a.usage.give(r.developer, useRun)
	a.recorder.note(r)

	dc := r.conn.Load()
	var names []string
	var released sync.WaitGroup
	for _, b := range bindings {
		names = append(names, b.Name+":"+portText(b.Port, b.UDP))
		released.Go(func() { a.release(r, b, e.movedTo != "") })
	}
	for _, v := range volumes {
		released.Go(func() { a.releaseVolume(r, *v) })
	}
	released.Wait()
	slices.Sort(names)
	how, reason := e.how, e.reason
	if e.movedTo != "" {
		how, reason = EndMoved, "the run moved to agent "+e.movedTo+", which serves its names now"
	}
	a.audit(AuditEvent{Event: AuditRunEnded, Run: r.id, User: r.user, Key: r.developer,
		How: how, By: e.by, Reason: reason, Names: names, Seconds: secondsSince(r.since)})
	switch {
	case dc == nil:
	case e.goodbye:
		dc.sendControl(goodbyeMsg{})
	case e.by != "":
		go dc.tellEnded(e) // closeAfterEnded unblocks it if the client does not read
		dc.closeAfterEnded()
	}
}

// handOver is how a stopping agent ends r. When r has a connection and
// names, it asks its client to move the run to another agent (endedMsg
// with Move) and waits until the client answers moved, closes this
// connection, or MoveWait passes; meanwhile this agent goes on carrying the
// run's callers and connections, so that none sees an error. A client that
// moved names the agent that holds its names now, and they are let go of
// (Release changes nothing); the names of a run that did not move — its
// client found no other agent (it answers moved naming none, and goes on
// answering callers while they are given back), a plain OpenSSH client, a
// run that is away, an older client that only reconnects — are given
// back, make before break.
func (a *Agent) handOver(r *run) ending {
	e := ending{how: EndAgentStopped, by: "agent", reason: "the agent is shutting down", retry: true}
	dc := r.conn.Load()
	if dc == nil || r.plain || !r.serves() {
		return e
	}
	a.logf("run %s: asking its client to move it to another agent", r.id)
	dc.sendControl(endedMsg{By: e.by, Reason: e.reason, Retry: true, Move: true})
	select {
	case <-dc.read: // a moved sent just before the close is read first
	case <-dc.moveAnswered:
	case <-time.After(a.MoveWait):
	}
	dc.mu.Lock()
	e.movedTo = dc.movedTo
	dc.mu.Unlock()
	return e
}

// serveName makes name:port (a UDP port with udp) in the cluster reach
// dc's client, for run r. A name the run already serves on that port is
// re-claimed by dc without asking the platform again: that is how a
// reconnected run keeps its names. With a non-empty filter the takeover is
// personal (agent_filtered.go); a UDP port has none.
func (a *Agent) serveName(r *run, dc *devConn, name string, port int, udp bool, filter Filter) (Served, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended || r.conn.Load() != dc {
		return Served{}, fmt.Errorf("run %s has ended on this connection", r.id)
	}
	if b := r.bindings[name]; b != nil {
		if b.Port != port || b.UDP != udp {
			return Served{}, fmt.Errorf("this run serves %s on %s already; a run serves a name on one port", name, portText(b.Port, b.UDP))
		}
		if b.filter().String() != filter.String() {
			return Served{}, fmt.Errorf("this run serves %s already, with another filter (%s); a run serves a name once", name, b.filter())
		}
		b.conn.Store(dc)
		if b.proof != nil {
			b.proof.retell()
		}
		return b.served, nil
	}
	if err := a.openServeRefusal(r.developer, name, !filter.Empty()); err != nil {
		return Served{}, err
	}
	if err := a.usage.take(r.developer, useName); err != nil {
		return Served{}, err
	}
	served := false
	defer func() {
		if !served {
			a.usage.give(r.developer, useName)
		}
	}()
	if !filter.Empty() {
		b, err := a.servePersonal(r, dc, name, port, filter)
		if err != nil {
			return Served{}, err
		}
		served = true
		a.started(r, b)
		return b.served, nil
	}
	if err := a.personalHolders(name); err != nil {
		return Served{}, err
	}
	b := &binding{since: time.Now()}
	b.Binding = Binding{
		Name:       name,
		Port:       port,
		UDP:        udp,
		Holder:     Holder{Run: r.id, Agent: a.ID, Developer: r.developer, User: r.user, Since: time.Now()},
		Notify:     func(e Event) { a.notifyFor(r, b, e) },
		NoTakeover: a.noTakeover(r.developer),
	}
	var pc *net.UDPConn
	var err error
	at := a.callerAddr()
	if udp {
		if pc, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(at, 0))); err == nil {
			b.Target = pc.LocalAddr().(*net.UDPAddr).Port
		}
	} else if b.listener, err = a.listenForCallers(); err == nil {
		b.Target = b.listener.Addr().(*net.TCPAddr).Port
		b.proof = newPathProof(name, port, a.Platform, func(e Event) { a.notify(r, e) }, a.logf)
	}
	if err != nil {
		return Served{}, fmt.Errorf("the agent cannot open a port for %s: %v", name, err)
	}
	ctx, cancel := a.platformContext()
	defer cancel()
	b.served, err = a.Platform.Serve(ctx, b.Binding)
	if errors.Is(err, ErrTakeoverNotAllowed) {
		err = takeoverRefusal(name)
	}
	if err != nil {
		if udp {
			pc.Close()
		} else {
			b.listener.Close()
		}
		return Served{}, err
	}
	b.conn.Store(dc)
	r.bindings[name] = b
	served = true
	if udp {
		b.flows = NewDatagramFlows(pc, a.flowBudget(r.developer), func(f net.Conn) { a.answerFlow(b, f) })
	} else {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.acceptCallers(b)
		}()
	}
	a.started(r, b)
	return b.served, nil
}

// callerAddr is the address the agent listens on for the callers of the
// names it serves: the Platform's CallerAddr, or 127.0.0.1 (also when the
// Platform knows no valid one: never every interface).
func (a *Agent) callerAddr() netip.Addr {
	if p, ok := a.Platform.(CallerAddresser); ok {
		if at := p.CallerAddr(); at.IsValid() {
			return at
		}
	}
	return netip.AddrFrom4([4]byte{127, 0, 0, 1})
}

// listenForCallers opens a TCP port for the callers of a served name, on
// callerAddr.
func (a *Agent) listenForCallers() (net.Listener, error) {
	return net.Listen("tcp", netip.AddrPortFrom(a.callerAddr(), 0).String())
}

// portText is port as messages write it: "8080", or "8125/udp".
func portText(port int, udp bool) string {
	if udp {
		return fmt.Sprintf("%d/udp", port)
	}
	return fmt.Sprint(port)
}

// started records b, served for r (whose mu is held), proves its path in
// the background (a TCP port's), and audits it.
func (a *Agent) started(r *run, b *binding) {
	proofCtx, stopProof := context.WithCancel(a.ctx)
	b.stopProof = stopProof
	if b.proof != nil {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			b.proof.run(proofCtx)
		}()
	}
	a.recorder.note(r)
	a.audit(AuditEvent{Event: AuditNameServed, Run: r.id, User: r.user, Key: r.developer, Name: b.Name, Port: b.Port, UDP: b.UDP, Mode: modeOf(b.served), Filter: b.filter().String()})
}

// filter is b's Filter: empty for a full takeover.
func (b *binding) filter() Filter {
	if b.match == nil {
		return Filter{}
	}
	return b.match.filter
}

// cancelName gives name:port (a UDP port with udp) back at the client's
// request.
func (a *Agent) cancelName(r *run, name string, port int, udp bool) bool {
	r.mu.Lock()
	b := r.bindings[name]
	if b == nil || b.Port != port || b.UDP != udp {
		r.mu.Unlock()
		return false
	}
	delete(r.bindings, name)
	r.mu.Unlock()
	a.recorder.note(r)
	a.release(r, b, false)
	return true
}

// release gives a binding's name back, make before break: the platform
// moves the name's endpoints back to the deployed service
// (Platform.Release) while the run, if still connected, goes on answering
// (a caller its process refuses goes to the deployed service already);
// callers that reach the agent after that go to the deployed service (or
// are refused), and the listener goes on taking them for Drain, for those
// the cluster's routing still sends here a moment longer. A name whose run
// moved to another agent is only let go of: Release changes nothing (the
// other agent holds it), and nothing is given back to audit.
func (a *Agent) release(r *run, b *binding, moved bool) {
	b.stopProof()
	a.usage.give(r.developer, useName)
	var err error
	if b.front != nil {
		err = a.leaveFront(b)
		b.givenBack.Store(true)
		b.conn.Store(nil)
		b.run.close()
	} else {
		ctx, cancel := a.platformContext()
		err = a.Platform.Release(ctx, b.Binding)
		cancel()
		b.givenBack.Store(true)
		b.conn.Store(nil)
		if b.flows != nil {
			a.drainThenClose(b.flows)
		} else {
			a.drainThenClose(b.listener)
		}
	}
	if err != nil {
		a.plog.printf(r.developer, "run %s: giving back %s:%d failed: %v", r.id, b.Name, b.Port, err)
	}
	if moved && err == nil {
		return
	}
	e := AuditEvent{Event: AuditNameBack, Run: r.id, User: r.user, Key: r.developer, Name: b.Name, Port: b.Port, UDP: b.UDP,
		Mode: modeOf(b.served), Seconds: secondsSince(b.since)}
	if err != nil {
		e.Reason = "not given back yet, the agent keeps trying: " + err.Error()
	}
	a.audit(e)
}

// drainThenClose closes l once Drain has passed: the callers the
// cluster's routing still sends there a moment longer are answered.
func (a *Agent) drainThenClose(l io.Closer) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		time.Sleep(a.Drain)
		l.Close()
	}()
}

// notify passes a platform event to the run's connection, if it has one.
// It never blocks.
func (a *Agent) notify(r *run, e Event) {
	if dc := r.conn.Load(); dc != nil {
		select {
		case dc.events <- e:
		default:
			a.plog.printf(r.developer, "run %s: event dropped, its client is not reading: %s", r.id, e.Text)
		}
	}
}

// remoteAddr is the address of the run's latest connection.
func (r *run) remoteAddr() net.Addr {
	if dc := r.conn.Load(); dc != nil {
		return dc.conn.RemoteAddr()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	addr, err := net.ResolveTCPAddr("tcp", r.from)
	if err != nil {
		return nil
	}
	return addr
}

// serves reports whether the run serves any name.
func (r *run) serves() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.bindings) > 0
}

// names lists what the run serves, for messages.
func (r *run) names() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return namesOf(r.bindings)
}

func namesOf(bindings map[string]*binding) string {
	if len(bindings) == 0 {
		return "nothing"
	}
	names := make([]string, 0, len(bindings))
	for _, b := range bindings {
		names = append(names, b.Name+":"+portText(b.Port, b.UDP))
	}
	return joinSorted(names)
}

// acceptCallers answers each caller of the binding (answerCaller) until
// its listener closes.
func (a *Agent) acceptCallers(b *binding) {
	for {
		c, err := b.listener.Accept()
		if err != nil {
			return
		}
		go a.answerCaller(b, c)
	}
}

// answerCaller hands a caller of b to the run's client. When the run
// cannot take it — it is away, its process does not answer, or the name is
// being given back — the caller goes to what the name reached before the
// run took it over (DeployedDialer), so that it sees no error; when there
// is nothing else (a name the run created), it is refused at once with a
// TCP reset, never left hanging. The path proof's own probes stop here.
func (a *Agent) answerCaller(b *binding, raw net.Conn) {
	c := b.proof.screen(raw)
	if c == nil {
		return
	}
	why := b.toRun(func(dc *devConn) bool { return dc.forwardCaller(b, c) }, "its process does not answer")
	if why == "" {
		return
	}
	if d, ok := a.Platform.(DeployedDialer); ok && b.served.TookOver {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), dialTimeout) // callers are answered during shutdown too
		up, err := d.DialDeployed(ctx, b.Binding)
		cancel()
		if err == nil {
			a.routed(b, routeDeployed, why)
			pipe(c, up)
			return
		}
		why += "; the deployed service cannot be reached: " + err.Error()
	}
	a.routed(b, routeRefused, why)
	if tcp, ok := raw.(*net.TCPConn); ok {
		tcp.SetLinger(0) // close with a reset: the caller learns at once
	}
	raw.Close()
}

// toRun hands a caller (or a flow) of b to the run's connection with
// forward, and returns "", or says why the run cannot take it: it is away,
// the name is given back, or refused (forward returned false).
func (b *binding) toRun(forward func(dc *devConn) bool, refused string) (why string) {
	if dc := b.conn.Load(); dc != nil {
		if forward(dc) {
			return ""
		}
		return refused
	}
	if b.givenBack.Load() {
		return "the name is given back"
	}
	return "the run is away"
}

// routed logs where b's callers go, when that changes.
func (a *Agent) routed(b *binding, route int32, why string) {
	if b.route.Swap(route) == route {
		return
	}
	run, dev := b.Holder.Run, b.Holder.Developer
	switch route {
	case routeRun:
		a.plog.printf(dev, "run %s: callers of %s:%s reach the run", run, b.Name, portText(b.Port, b.UDP))
	case routeDeployed:
		a.plog.printf(dev, "run %s: callers of %s:%d go to the deployed service (%s)", run, b.Name, b.Port, why)
	case routeRefused:
		a.plog.printf(dev, "run %s: callers of %s:%s are refused (%s)", run, b.Name, portText(b.Port, b.UDP), why)
	}
}

// newRunID makes a run id: 128 random bits, so that no one guesses
// another's (which would not let them act as that run anyway: a run belongs
// to its key).
func newRunID(prefix string) string {
	var b [16]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
