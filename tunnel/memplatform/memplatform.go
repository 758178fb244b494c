// Package memplatform is the Platform of an agent with no cluster
// (PLUG_PLATFORM=memory): the cluster is the agent's own process. A served
// name is reached, by DialContext, at the agent's Target on 127.0.0.1; no
// other name resolves, and the served names are the only names to consume.
// It changes nothing anywhere, so it needs no rights and has nothing to
// sweep. Its cluster being this machine's loopback, the address rules of
// the agent's dial policy (tunnel.DialControl) do not apply to it: it
// dials nothing but its served names.
//
// tunnel/tunneltest builds the tests' platform on it.
package memplatform

import (
	"context"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"

	"plug/tunnel"
)

// Platform is a tunnel.Platform whose cluster is this process. Its zero
// value is not ready: use New.
type Platform struct {
	mu      sync.Mutex
	served  map[string]tunnel.Binding
	changed chan struct{} // closed and replaced when the served names change
}

var _ tunnel.NamedPlatform = (*Platform)(nil)

// New returns a Platform that serves no name yet.
func New() *Platform {
	return &Platform{served: map[string]tunnel.Binding{}, changed: make(chan struct{})}
}

// String names the platform (tunnel.NamedPlatform).
func (p *Platform) String() string { return "in-memory platform" }

// Serve records b, refusing with a *tunnel.HeldError a name another run
// holds, or the same run id of another key.
func (p *Platform) Serve(ctx context.Context, b tunnel.Binding) (tunnel.Served, error) {
	if err := tunnel.CheckName(b.Name); err != nil {
		return tunnel.Served{}, err
	}
	if err := tunnel.CheckPort(b.Port); err != nil {
		return tunnel.Served{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if held, ok := p.served[b.Name]; ok && !held.Holder.SameRun(b.Holder) {
		return tunnel.Served{}, &tunnel.HeldError{Name: b.Name, Holder: held.Holder}
	}
	if _, had := p.served[b.Name]; !had {
		defer p.bump()
	}
	p.served[b.Name] = b
	return tunnel.Served{Detail: b.Name + " is new in the cluster"}, nil
}

// Release gives b.Name back if b's run, of the same key, holds it through
// b's agent (a run that moved to another agent is held by that one now).
func (p *Platform) Release(ctx context.Context, b tunnel.Binding) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if held, ok := p.served[b.Name]; ok && held.Holder.SameRun(b.Holder) && held.Holder.Agent == b.Holder.Agent {
		delete(p.served, b.Name)
		p.bump()
	}
	return nil
}

// bump wakes those waiting for the served names to change. Called with
// p.mu held.
func (p *Platform) bump() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// Names returns the served names, each with its port (TCP or UDP), sorted, and a
// channel closed at their next change.
func (p *Platform) Names() ([]tunnel.ClusterName, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var names []tunnel.ClusterName
	for _, name := range slices.Sorted(maps.Keys(p.served)) {
		n := tunnel.ClusterName{Name: name, Ports: []int{p.served[name].Port}}
		if p.served[name].UDP {
			n.Ports, n.UDPPorts = nil, n.Ports
		}
		names = append(names, n)
	}
	return names, p.changed
}

// Held returns the binding that holds name, if any.
func (p *Platform) Held(name string) (tunnel.Binding, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok := p.served[name]
	return b, ok
}

// DialContext reaches a served name, at its port and over its protocol,
// at its agent's Target; any other name does not resolve.
func (p *Platform) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	b, served := p.Held(host)
	if !served || strconv.Itoa(b.Port) != port || b.UDP != strings.HasPrefix(network, "udp") {
		return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}}
	}
	var d net.Dialer
	return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", strconv.Itoa(b.Target)))
}

// Maintain has nothing to maintain.
func (p *Platform) Maintain(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// Rights grants everything.
func (p *Platform) Rights(ctx context.Context) ([]tunnel.Right, error) { return nil, nil }

// WatchNames reports the served names (Names), at once and at each
// change, until ctx ends.
func (p *Platform) WatchNames(ctx context.Context, update func([]tunnel.ClusterName)) error {
	for {
		names, changed := p.Names()
		update(names)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}
