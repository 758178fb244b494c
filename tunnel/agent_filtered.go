package tunnel

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Personal takeovers (plug -s ... --header/--path): the name is taken over
// as for a full takeover (the same Platform.Serve, receipt and restore),
// but its callers reach the agent's front for the name, which routes each
// HTTP request (httproute.go): to the run whose Filter matches it, or to
// the deployed service (DeployedDialer). Several runs on one agent share
// one front, and the one Platform binding, as long as their filters do not
// overlap; the first run's Holder holds it, and when that run leaves, the
// next one does (HolderMover). The last one out gives the name back.

// front is the one listener of a name's personal takeovers on this agent.
type front struct {
	a        *Agent
	name     string
	port     int
	listener net.Listener
	served   Served
	routes   *httpRoutes // serves the callers' HTTP (httproute.go)

	// Guarded by the agent's frontsMu.
	holder  Binding    // what Platform.Serve was asked for: a member's binding
	members []*binding // in the order they came

	current atomic.Pointer[[]*binding] // members, for routing without the lock
}

// servePersonal takes name:port over for r (whose mu is held) with the
// filter: joins the name's front on this agent, or makes it.
func (a *Agent) servePersonal(r *run, dc *devConn, name string, port int, filter Filter) (*binding, error) {
	m, err := filter.compile()
	if err != nil {
		return nil, err
	}
	if _, ok := a.Platform.(DeployedLister); !ok {
		return nil, fmt.Errorf("a personal takeover (--header, --path) sends the requests of no filter to the deployed service, which this agent's platform does not keep running during a takeover; serve %s without them", name)
	}
	b := &binding{since: time.Now(), match: m}
	b.Binding = Binding{
		Name:   name,
		Port:   port,
		Holder: Holder{Run: r.id, Agent: a.ID, Developer: r.developer, User: r.user, Since: time.Now()},
		Filter: filter.String(),
		Notify: func(e Event) { a.notifyFor(r, b, e) },
	}
	b.proof = newPathProof(name, port, a.Platform, func(e Event) { a.notify(r, e) }, a.logf)
	b.conn.Store(dc)
	if err := a.joinFront(b); err != nil {
		return nil, err
	}
	r.bindings[name] = b
	return b, nil
}

// joinFront adds b to its name's front, after checking that its filter
// overlaps no other member's, or makes the front: a listener, and the
// takeover of the name by the platform for b.
func (a *Agent) joinFront(b *binding) error {
	a.frontsMu.Lock()
	defer a.frontsMu.Unlock()
	if f := a.fronts[b.Name]; f != nil {
		if f.port != b.Port {
			return Refused(b.Name, "%s is taken over personally on port %d; a personal takeover of it serves that port (-s %s:%d:LOCALPORT)", b.Name, f.port, b.Name, f.port)
		}
		for _, o := range f.members {
			if o.Holder.SameRun(b.Holder) {
				continue
			}
			if o.filter().Overlaps(b.filter()) {
				return Refused(b.Name, "%s: your filter (%s) overlaps the personal takeover of %s, whose filter is %s; a request could match both. Choose a header value of your own (exact values that differ never overlap)",
					b.Name, b.filter(), o.Holder, o.filter())
			}
		}
		b.Target, b.served, b.front = f.holder.Target, f.served, f
		b.served.Detail = fmt.Sprintf("%s:%d: the requests with %s reach this run; %s", b.Name, b.Port, b.filter(), f.others(b))
		f.setMembers(append(slices.Clone(f.members), b))
		return nil
	}
	l, err := a.listenForCallers()
	if err != nil {
		return fmt.Errorf("the agent cannot open a port for %s: %v", b.Name, err)
	}
	b.Target = l.Addr().(*net.TCPAddr).Port
	ctx, cancel := a.platformContext()
	defer cancel()
	served, err := a.Platform.Serve(ctx, b.Binding)
	if err == nil && !served.TookOver {
		a.Platform.Release(ctx, b.Binding)
		err = Refused(b.Name, "%s: %v", b.Name, errNotFiltered)
	}
	if err != nil {
		l.Close()
		return err
	}
	f := &front{a: a, name: b.Name, port: b.Port, listener: l, holder: b.Binding}
	f.served = Served{TookOver: true, Detail: served.Detail + fmt.Sprintf("; only the requests with %s reach this run, every other caller the deployed service", b.filter())}
	f.routes = newHTTPRoutes(f)
	b.served, b.front = f.served, f
	f.setMembers([]*binding{b})
	a.fronts[b.Name] = f
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		f.accept()
	}()
	return nil
}

// others says who else takes f's name over personally, for b's terminal.
func (f *front) others(b *binding) string {
	var who []string
	for _, o := range f.members {
		if o != b {
			who = append(who, fmt.Sprintf("%s (%s)", PeerText(o.Holder.User), o.filter()))
		}
	}
	return "shared with " + strings.Join(who, ", ")
}

// setMembers makes members f's; the agent's frontsMu is held.
func (f *front) setMembers(members []*binding) {
	f.members = members
	f.current.Store(&members)
}

// leaveFront takes b out of its front. The last member out gives the name
// back (Platform.Release) and closes the front once Drain has passed; when
// the member holding the platform's binding leaves, the next one holds it
// (HolderMover).
func (a *Agent) leaveFront(b *binding) error {
	a.frontsMu.Lock()
	defer a.frontsMu.Unlock()
	f := b.front
	f.setMembers(slices.DeleteFunc(slices.Clone(f.members), func(o *binding) bool { return o == b }))
	ctx, cancel := a.platformContext()
	defer cancel()
	if len(f.members) == 0 {
		if a.fronts[f.name] == f {
			delete(a.fronts, f.name)
		}
		err := a.Platform.Release(ctx, f.holder)
		a.drainThenClose(f)
		return err
	}
	if !f.holder.Holder.SameRun(b.Holder) {
		return nil
	}
	mover, ok := a.Platform.(HolderMover)
	if !ok {
		return nil // the platform keeps it under b's holder until the last one leaves
	}
	next := f.members[0].Binding
	if err := mover.MoveHolder(ctx, f.holder, next); err != nil {
		a.logf("%s: the personal takeover of %s goes on under %s: %v", f.name, PeerText(next.Holder.User), PeerText(b.Holder.User), err)
		return nil
	}
	f.holder = next
	return nil
}

// Close closes the front's listener and the connections it routes.
func (f *front) Close() error {
	err := f.listener.Close()
	f.routes.close()
	return err
}

// personalHolders refuses a full takeover of name while runs of this agent
// hold it personally, naming them.
func (a *Agent) personalHolders(name string) error {
	a.frontsMu.Lock()
	defer a.frontsMu.Unlock()
	f := a.fronts[name]
	if f == nil {
		return nil
	}
	var who []string
	for _, o := range f.members {
		who = append(who, fmt.Sprintf("%s with %s", o.Holder, o.filter()))
	}
	return Refused(name, "%s is taken over personally by %s; a full takeover waits until they end, or serve it personally too with a --header of your own", name, strings.Join(who, "; "))
}

// accept answers each caller of the front until its listener closes.
func (f *front) accept() {
	for {
		c, err := f.listener.Accept()
		if err != nil {
			return
		}
		go f.answer(c)
	}
}

// answer screens a caller for the members' path proofs, then routes it.
func (f *front) answer(c net.Conn) {
	for _, b := range *f.current.Load() {
		if c = b.proof.screen(c); c == nil {
			return
		}
	}
	f.routes.serve(c)
}

// route is the member whose filter r matches, or nil.
func (f *front) route(r *http.Request) *binding {
	for _, b := range *f.current.Load() {
		if b.match.match(r) {
			return b
		}
	}
	return nil
}
