// Package tunneltest helps test plug's tunnel without a cluster: an
// in-memory Platform, an agent on loopback, and a TCP proxy whose
// connections can be cut or silenced.
package tunneltest

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"syscall"

	"plug/tunnel"
	"plug/tunnel/memplatform"
)

// Platform is the in-memory platform of tunnel/memplatform with what tests
// need beside it: workloads registered with AddWorkload stand for deployed
// services, which Serve takes over and DialDeployed reaches; names set with SetNames are what runs
// consume (WatchNames), with the served names; Hold has another run hold a
// name; and every Serve and Release is recorded (Calls, Count). The agents
// sharing one keep their run records in it (tunnel.RunStore) and their
// members (tunnel.MemberStore), as replicas in a cluster do.
type Platform struct {
	*memplatform.Platform

	// routing is held (shared) by a dial from its lookup until it has
	// connected, and (exclusive) by Release: a caller that found a name
	// served has reached the agent's listener before Release returns, as
	// the cluster's routing, with the agent's Drain, makes sure.
	routing sync.RWMutex

	mu        sync.Mutex
	workloads map[string]string // "name:port" → the address that answers it
	calls     []Call
	names     []tunnel.ClusterName
	changed   chan struct{} // closed and replaced at each SetNames

	runRecords  // the run records of every agent sharing it
	memberStore // the members of admission by approval
}

var (
	_ tunnel.NamedPlatform  = (*Platform)(nil)
	_ tunnel.DeployedLister = (*Platform)(nil)
)

// Call is one recorded Serve or Release.
type Call struct {
	Op   string // "serve" or "release"
	Name string
	Port int
	Run  string
}

func (c Call) String() string {
	return fmt.Sprintf("%s %s:%d for run %s", c.Op, c.Name, c.Port, c.Run)
}

// NewPlatform returns an empty in-memory platform.
func NewPlatform() *Platform {
	return &Platform{Platform: memplatform.New(), workloads: map[string]string{}, changed: make(chan struct{})}
}

// AddWorkload makes address ("name:port") answer at target, as a deployed
// service of the cluster.
func (p *Platform) AddWorkload(address, target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.workloads[address] = target
}

// Serve serves b as memplatform does and records it; a name a workload
// answers is taken over, or refused with tunnel.ErrTakeoverNotAllowed when
// b.NoTakeover.
func (p *Platform) Serve(ctx context.Context, b tunnel.Binding) (tunnel.Served, error) {
	p.mu.Lock()
	_, deployed := p.workloads[net.JoinHostPort(b.Name, strconv.Itoa(b.Port))]
	p.mu.Unlock()
	if deployed && b.NoTakeover {
		return tunnel.Served{}, tunnel.ErrTakeoverNotAllowed
	}
	served, err := p.Platform.Serve(ctx, b)
	if err != nil {
		return served, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, Call{Op: "serve", Name: b.Name, Port: b.Port, Run: b.Holder.Run})
	if _, deployed := p.workloads[net.JoinHostPort(b.Name, strconv.Itoa(b.Port))]; deployed {
		return tunnel.Served{TookOver: true, Detail: "the deployed " + b.Name + " is parked"}, nil
	}
	return served, nil
}

// Release records b and gives b.Name back if b's run holds it.
func (p *Platform) Release(ctx context.Context, b tunnel.Binding) error {
	p.mu.Lock()
	p.calls = append(p.calls, Call{Op: "release", Name: b.Name, Port: b.Port, Run: b.Holder.Run})
	p.mu.Unlock()
	p.routing.Lock()
	defer p.routing.Unlock()
	return p.Platform.Release(ctx, b)
}

// Hold makes name:port held by another run, as if another developer
// served it. It is not recorded.
func (p *Platform) Hold(name string, port int, holder tunnel.Holder) {
	p.Platform.Serve(context.Background(), tunnel.Binding{Name: name, Port: port, Holder: holder})
}

// DialContext reaches a served name at its agent's Target, else a
// registered workload. A name set with SetNames that no workload answers
// refuses the connection, as a Service without endpoints does; any other
// name does not resolve.
func (p *Platform) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	p.routing.RLock()
	defer p.routing.RUnlock()
	if b, served := p.Held(host); served && strconv.Itoa(b.Port) == port {
		return p.Platform.DialContext(ctx, network, address)
	}
	p.mu.Lock()
	target, ok := p.workloads[address]
	p.mu.Unlock()
	if ok {
		var d net.Dialer
		return d.DialContext(ctx, network, target)
	}
	if p.named(host) {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	return p.Platform.DialContext(ctx, network, address)
}

// DialDeployed reaches the workload registered for b.Name:b.Port, which
// b took over (tunnel.DeployedDialer).
func (p *Platform) DialDeployed(ctx context.Context, b tunnel.Binding) (net.Conn, error) {
	address := net.JoinHostPort(b.Name, strconv.Itoa(b.Port))
	p.mu.Lock()
	target, ok := p.workloads[address]
	p.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("nothing deployed answers %s", address)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", target)
}

// DeployedAddrs is the address of the workload registered for
// b.Name:b.Port (tunnel.DeployedLister).
func (p *Platform) DeployedAddrs(b tunnel.Binding) ([]string, error) {
	address := net.JoinHostPort(b.Name, strconv.Itoa(b.Port))
	p.mu.Lock()
	defer p.mu.Unlock()
	target, ok := p.workloads[address]
	if !ok {
		return nil, fmt.Errorf("nothing deployed answers %s", address)
	}
	return []string{target}, nil
}

// SetNames replaces the names the platform's workloads reach; WatchNames
// passes them on at once.
func (p *Platform) SetNames(names ...tunnel.ClusterName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.names = names
	close(p.changed)
	p.changed = make(chan struct{})
}

// WatchNames passes on the names of SetNames, and the served names that
// are not among them, at once and at each change.
func (p *Platform) WatchNames(ctx context.Context, update func([]tunnel.ClusterName)) error {
	for {
		p.mu.Lock()
		names, changed := slices.Clone(p.names), p.changed
		p.mu.Unlock()
		served, servedChanged := p.Platform.Names()
		for _, n := range served {
			if !slices.ContainsFunc(names, func(m tunnel.ClusterName) bool { return m.Name == n.Name }) {
				names = append(names, n)
			}
		}
		update(names)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-servedChanged:
		}
	}
}

// named reports whether host is a name or alias set with SetNames.
func (p *Platform) named(host string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range p.names {
		if n.Name == host || slices.Contains(n.Aliases, host) {
			return true
		}
	}
	return false
}

// Calls returns the recorded calls, oldest first.
func (p *Platform) Calls() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// Count returns how many calls op ("serve" or "release") had for name.
func (p *Platform) Count(op, name string) int {
	n := 0
	for _, c := range p.Calls() {
		if c.Op == op && c.Name == name {
			n++
		}
	}
	return n
}
