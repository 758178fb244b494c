package tunnel

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// run is one plug run: a CLI process, or a plain OpenSSH connection, and the
// names it serves. A run outlives a dropped connection for the agent's Grace,
// so that the CLI can reconnect and keep its names.
type run struct {
	id        string
	developer string // fingerprint of the key, "SHA256:..."
	user      string
	plain     bool // opened without a hello: nothing can re-attach to it
	since     time.Time

	conn atomic.Pointer[devConn] // the connection it lives on; nil while detached

	mu       sync.Mutex
	ended    bool
	bindings map[string]*binding
	grace    *time.Timer
}

// binding is a name a run serves, and the listener the platform sends its
// callers to.
type binding struct {
	Binding
	served    Served
	listener  net.Listener
	proof     *pathProof         // proves the name reaches listener
	stopProof context.CancelFunc // ends the proof when the name is given back
	// conn is where callers are forwarded; nil while the run's client has
	// not (re-)claimed the name, and callers are then turned away.
	conn atomic.Pointer[devConn]
}

// ending says why a run ends.
type ending struct {
	by, reason string
	retry      bool // the agent is only going away: the client should reconnect
	goodbye    bool // the client said goodbye: acknowledge once the names are back
	ifDetached bool // only if no connection re-attached meanwhile (grace expiry)
}

var errAgentStopping = errors.New("the agent is shutting down; try again in a moment")

// newRun registers a run living on dc; nil once the agent is shutting down.
func (a *Agent) newRun(id string, dc *devConn, plain bool) *run {
	r := &run{
		id:        id,
		developer: dc.fingerprint,
		user:      dc.conn.User(),
		plain:     plain,
		since:     time.Now(),
		bindings:  map[string]*binding{},
	}
	r.conn.Store(dc)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closing {
		return nil
	}
	a.runs[id] = r
	a.logf("run %s opened by %s (%s) from %s", id, r.user, r.developer, dc.conn.RemoteAddr())
	return r
}

// attach gives dc the run its hello names: the run kept since an earlier
// connection of the same key (resumed), or a new one.
func (a *Agent) attach(dc *devConn, h helloMsg) (r *run, resumed bool, err error) {
	a.mu.Lock()
	r = a.runs[h.Run]
	a.mu.Unlock()
	if r != nil {
		if resumed, err = r.reattach(dc); err != nil || resumed {
			if resumed {
				a.logf("run %s re-attached from %s", r.id, dc.conn.RemoteAddr())
			}
			return r, resumed, err
		}
	}
	if r = a.newRun(h.Run, dc, false); r == nil {
		return nil, false, errAgentStopping
	}
	return r, false, nil
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
		return false, fmt.Errorf("run %s belongs to another key; start a new run", r.id)
	}
	old := r.conn.Swap(dc)
	if r.grace != nil {
		r.grace.Stop()
		r.grace = nil
	}
	r.mu.Unlock()
	if old != nil && old != dc {
		old.conn.Close()
	}
	return true, nil
}

// detach is called when dc is closed: its run keeps its names for Grace,
// or ends at once if nothing could re-attach to it or it serves nothing.
func (a *Agent) detach(dc *devConn, r *run) {
	r.mu.Lock()
	if r.ended || !r.conn.CompareAndSwap(dc, nil) {
		r.mu.Unlock()
		return
	}
	for _, b := range r.bindings {
		b.conn.CompareAndSwap(dc, nil)
	}
	if r.plain || len(r.bindings) == 0 {
		r.mu.Unlock()
		a.endRun(r, ending{reason: "dropped"})
		return
	}
	r.grace = time.AfterFunc(a.Grace, func() { a.expire(r) })
	r.mu.Unlock()
	a.logf("run %s dropped; keeping %s for %s", r.id, r.names(), a.Grace)
}

// expire ends a run whose grace ran out without a reconnect.
func (a *Agent) expire(r *run) {
	a.endRun(r, ending{reason: "dropped, and did not come back within " + a.Grace.String(), ifDetached: true})
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
	a.endRun(r, ending{by: by, reason: reason})
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
	r.mu.Unlock()

	a.mu.Lock()
	if a.runs[r.id] == r {
		delete(a.runs, r.id)
	}
	a.mu.Unlock()

	dc := r.conn.Load()
	names := namesOf(bindings)
	for _, b := range bindings {
		a.release(r, b)
	}
	how := e.reason
	if e.by != "" {
		how = "ended by " + e.by + ": " + e.reason
	}
	a.logf("run %s of %s (%s) ended after %s (%s); gave back %s",
		r.id, r.user, r.developer, time.Since(r.since).Round(time.Second), how, names)
	switch {
	case dc == nil:
	case e.goodbye:
		dc.sendControl(goodbyeMsg{})
	case e.by != "":
		go dc.tellEnded(e) // closeAfterEnded unblocks it if the client does not read
		dc.closeAfterEnded()
	}
}

// serveName makes name:port in the cluster reach dc's client, for run r.
// A name the run already serves on that port is re-claimed by dc without
// asking the platform again: that is how a reconnected run keeps its names.
func (a *Agent) serveName(r *run, dc *devConn, name string, port int) (Served, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended || r.conn.Load() != dc {
		return Served{}, fmt.Errorf("run %s has ended on this connection", r.id)
	}
	if b := r.bindings[name]; b != nil {
		if b.Port != port {
			return Served{}, fmt.Errorf("this run serves %s on port %d already; a run serves a name on one port", name, b.Port)
		}
		b.conn.Store(dc)
		b.proof.retell()
		return b.served, nil
	}
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		return Served{}, fmt.Errorf("the agent cannot open a port for %s: %v", name, err)
	}
	b := &binding{listener: l}
	b.Binding = Binding{
		Name:   name,
		Port:   port,
		Target: l.Addr().(*net.TCPAddr).Port,
		Holder: Holder{Run: r.id, Agent: a.ID, Developer: r.developer, User: r.user, Since: time.Now()},
		Notify: func(e Event) { a.notifyFor(r, b, e) },
	}
	b.proof = newPathProof(name, port, a.Platform, func(e Event) { a.notify(r, e) }, a.logf)
	ctx, cancel := a.platformContext()
	defer cancel()
	b.served, err = a.Platform.Serve(ctx, b.Binding)
	if err != nil {
		l.Close()
		return Served{}, err
	}
	b.conn.Store(dc)
	r.bindings[name] = b
	proofCtx, stopProof := context.WithCancel(a.ctx)
	b.stopProof = stopProof
	a.wg.Add(2)
	go func() {
		defer a.wg.Done()
		b.acceptCallers()
	}()
	go func() {
		defer a.wg.Done()
		b.proof.run(proofCtx)
	}()
	a.logf("run %s serves %s:%d (took over: %t)", r.id, name, port, b.served.TookOver)
	return b.served, nil
}

// cancelName gives name:port back at the client's request.
func (a *Agent) cancelName(r *run, name string, port int) bool {
	r.mu.Lock()
	b := r.bindings[name]
	if b == nil || b.Port != port {
		r.mu.Unlock()
		return false
	}
	delete(r.bindings, name)
	r.mu.Unlock()
	a.release(r, b)
	return true
}

// release closes a binding's listener and gives its name back.
func (a *Agent) release(r *run, b *binding) {
	b.listener.Close()
	b.stopProof()
	ctx, cancel := a.platformContext()
	defer cancel()
	if err := a.Platform.Release(ctx, b.Binding); err != nil {
		a.logf("run %s: giving back %s:%d failed: %v", r.id, b.Name, b.Port, err)
		return
	}
	a.logf("run %s gave back %s:%d", r.id, b.Name, b.Port)
}

// notify passes a platform event to the run's connection, if it has one.
// It never blocks.
func (a *Agent) notify(r *run, e Event) {
	if dc := r.conn.Load(); dc != nil {
		select {
		case dc.events <- e:
		default:
			a.logf("run %s: event dropped, its client is not reading: %s", r.id, e.Text)
		}
	}
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
		names = append(names, fmt.Sprintf("%s:%d", b.Name, b.Port))
	}
	return joinSorted(names)
}

// acceptCallers forwards each caller of the binding to the connection that
// claims it, and turns callers away while none does. The path proof's own
// probes stop here.
func (b *binding) acceptCallers() {
	for {
		c, err := b.listener.Accept()
		if err != nil {
			return
		}
		go func() {
			if c = b.proof.screen(c); c == nil {
				return
			}
			dc := b.conn.Load()
			if dc == nil {
				c.Close()
				return
			}
			dc.forwardCaller(b, c)
		}()
	}
}

// newRunID makes an id for a run whose client did not choose one.
func newRunID(prefix string) string {
	var b [8]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
