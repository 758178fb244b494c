package tunnel

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"syscall"
)

// MemoryPlatform is a Platform whose cluster is this process: a served name
// is reached, by DialContext, at the agent's Target on 127.0.0.1; a workload
// registered with AddWorkload stands for a deployed service, which Serve
// takes over. Every Serve and Release is recorded. Its names (WatchNames)
// are those set with SetNames. It is the agent's platform in tests, and of
// an agent started with no cluster.
type MemoryPlatform struct {
	mu        sync.Mutex
	served    map[string]Binding
	workloads map[string]string // "name:port" → the address that answers it
	calls     []MemoryCall
	names     catalogState
}

// MemoryCall is one recorded Serve or Release.
type MemoryCall struct {
	Op   string // "serve" or "release"
	Name string
	Port int
	Run  string
}

// NewMemoryPlatform returns an empty in-memory platform.
func NewMemoryPlatform() *MemoryPlatform {
	return &MemoryPlatform{served: map[string]Binding{}, workloads: map[string]string{}}
}

func (p *MemoryPlatform) String() string { return "in-memory platform" }

// AddWorkload makes address ("name:port") answer at target, as a deployed
// service of the cluster.
func (p *MemoryPlatform) AddWorkload(address, target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.workloads[address] = target
}

// Serve records b, refusing a name another run holds with a *HeldError.
func (p *MemoryPlatform) Serve(ctx context.Context, b Binding) (Served, error) {
	if err := CheckName(b.Name); err != nil {
		return Served{}, err
	}
	if err := CheckPort(b.Port); err != nil {
		return Served{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if held, ok := p.served[b.Name]; ok && held.Holder.Run != b.Holder.Run {
		return Served{}, &HeldError{Name: b.Name, Holder: held.Holder}
	}
	p.calls = append(p.calls, MemoryCall{Op: "serve", Name: b.Name, Port: b.Port, Run: b.Holder.Run})
	p.served[b.Name] = b
	if _, deployed := p.workloads[net.JoinHostPort(b.Name, strconv.Itoa(b.Port))]; deployed {
		return Served{TookOver: true, Detail: "the deployed " + b.Name + " is parked"}, nil
	}
	return Served{Detail: b.Name + " is new in the cluster"}, nil
}

// Release gives b.Name back if b's run holds it.
func (p *MemoryPlatform) Release(ctx context.Context, b Binding) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, MemoryCall{Op: "release", Name: b.Name, Port: b.Port, Run: b.Holder.Run})
	if held, ok := p.served[b.Name]; ok && held.Holder.Run == b.Holder.Run {
		delete(p.served, b.Name)
	}
	return nil
}

// DialContext reaches a served name at its agent's Target, else a
// registered workload. A name set with SetNames that no workload answers
// refuses the connection, as a Service without endpoints does; any other
// name does not resolve.
func (p *MemoryPlatform) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	target, ok := p.workloads[address]
	if b, served := p.served[host]; served && strconv.Itoa(b.Port) == port {
		target, ok = net.JoinHostPort("127.0.0.1", strconv.Itoa(b.Target)), true
	}
	p.mu.Unlock()
	if !ok {
		if p.named(host) {
			return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
		}
		return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}}
	}
	var d net.Dialer
	return d.DialContext(ctx, network, target)
}

// Maintain has nothing to maintain.
func (p *MemoryPlatform) Maintain(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// Rights grants everything.
func (p *MemoryPlatform) Rights(ctx context.Context) ([]Right, error) { return nil, nil }

// SetNames replaces the names the platform's workloads reach; WatchNames
// passes them on at once.
func (p *MemoryPlatform) SetNames(names ...ClusterName) {
	p.names.set(Catalog{Names: names})
}

// WatchNames passes on the names of SetNames: none until it is called.
func (p *MemoryPlatform) WatchNames(ctx context.Context, update func([]ClusterName)) error {
	for {
		c, _, changed := p.names.get()
		update(c.Names)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// named reports whether host is a name or alias set with SetNames.
func (p *MemoryPlatform) named(host string) bool {
	c, _, _ := p.names.get()
	for _, n := range c.Names {
		if n.Name == host || slices.Contains(n.Aliases, host) {
			return true
		}
	}
	return false
}

// Hold makes name:port held by another run, as if another developer
// served it.
func (p *MemoryPlatform) Hold(name string, port int, holder Holder) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.served[name] = Binding{Name: name, Port: port, Holder: holder}
}

// Held returns the binding that holds name, if any.
func (p *MemoryPlatform) Held(name string) (Binding, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok := p.served[name]
	return b, ok
}

// Calls returns the recorded calls, oldest first.
func (p *MemoryPlatform) Calls() []MemoryCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]MemoryCall(nil), p.calls...)
}

// Count returns how many calls op ("serve" or "release") had for name.
func (p *MemoryPlatform) Count(op, name string) int {
	n := 0
	for _, c := range p.Calls() {
		if c.Op == op && c.Name == name {
			n++
		}
	}
	return n
}

func (c MemoryCall) String() string {
	return fmt.Sprintf("%s %s:%d for run %s", c.Op, c.Name, c.Port, c.Run)
}
