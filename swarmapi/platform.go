package swarmapi

import (
	"context"
	"maps"
	"net"
	"sync"
	"time"

	"plug/tunnel"
)

// Timing of the platform's background duties.
const (
	// heartbeatEvery is how often an agent renews the heartbeat label of
	// the relays it holds.
	heartbeatEvery = 20 * time.Second
	// staleAfter is how old a heartbeat may get before any agent's sweep
	// gives the name back, even when the holder's task still seems to run.
	staleAfter = 90 * time.Second
	// sweepEvery is how often the sweep runs after the one at start.
	sweepEvery = time.Minute
	// startTimeout bounds the wait for a relay's task to run, and for a
	// parked service's tasks to stop.
	startTimeout = 45 * time.Second
)

// Config is what a Platform knows about the agent it serves.
type Config struct {
	Client *Client

	// Task is the agent's own task ID. Relays and receipts name it, so that
	// every agent's sweep can tell when their holder is gone. Empty when the
	// agent is not a swarm task; then only the heartbeat tells.
	Task string
	// Service is the agent's own service ID: it is never taken over.
	Service string
	// Node is the node relays are placed on: the agent's, which holds the
	// agent's image. Empty places them anywhere.
	Node string
	// Image is the image relays run: the agent's own, whose binary has the
	// relay command.
	Image string
	// Address is the agent's IP address that relays dial; it must be
	// reachable from the first of Networks.
	Address string
	// Networks are the overlay networks the agent is attached to: names it
	// serves are put on all of them.
	Networks []NetworkRef

	// Logf receives one line per change the platform makes or undoes.
	Logf func(format string, args ...any)
}

// NetworkRef names a network.
type NetworkRef struct {
	ID   string
	Name string
}

// Platform is plug's Swarm platform: it serves names on the agent's overlay
// networks through relay services, parks deployed services behind them,
// and undoes both at Release or, for a holder that is gone, in the sweep.
// It implements tunnel.Platform.
type Platform struct {
	cfg    Config
	dialer net.Dialer

	mu    sync.Mutex
	names map[string]*sync.Mutex // serialises Serve and Release per name
	held  map[string]*holding    // the names this agent serves, by name
}

// holding is a name this agent serves: its relay and the bindings on it.
type holding struct {
	relayID  string
	parked   string // ID of the parked service, if the name was taken over
	bindings map[int]tunnel.Binding
	warned   bool // the developer was told the takeover was reverted
}

var _ tunnel.Platform = (*Platform)(nil)

// NewPlatform returns the platform an agent described by cfg runs.
func NewPlatform(cfg Config) *Platform {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	return &Platform{cfg: cfg, names: map[string]*sync.Mutex{}, held: map[string]*holding{}}
}

// DialContext connects to address ("name:port") from the agent's container:
// Docker's resolver answers service names and aliases of the networks the
// agent is on, as it does for any task there.
func (p *Platform) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return p.dialer.DialContext(ctx, network, address)
}

// lockName serialises this agent's changes to one name and returns the
// unlock.
func (p *Platform) lockName(name string) func() {
	p.mu.Lock()
	m := p.names[name]
	if m == nil {
		m = &sync.Mutex{}
		p.names[name] = m
	}
	p.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// addBinding records that this agent serves b through the relay relayID
// (which parked the service parked, if not empty).
func (p *Platform) addBinding(b tunnel.Binding, relayID, parked string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.held[b.Name]
	if h == nil || h.relayID != relayID {
		h = &holding{relayID: relayID, parked: parked, bindings: map[int]tunnel.Binding{}}
		p.held[b.Name] = h
	}
	h.bindings[b.Port] = b
}

// dropBinding forgets one port of a name this agent serves.
func (p *Platform) dropBinding(name string, port int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h := p.held[name]; h != nil {
		delete(h.bindings, port)
	}
}

// markWarned records that the developer was told the takeover of name was
// reverted, so they are told once: it reports whether this is the first
// time.
func (p *Platform) markWarned(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.held[name]
	if h == nil || h.warned {
		return false
	}
	h.warned = true
	return true
}

// forget forgets a name this agent served.
func (p *Platform) forget(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.held, name)
}

// relayHeld returns the ID of the relay through which this agent serves
// name, or "".
func (p *Platform) relayHeld(name string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h := p.held[name]; h != nil {
		return h.relayID
	}
	return ""
}

// holdings returns a copy of what this agent serves, by name.
func (p *Platform) holdings() map[string]holding {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]holding, len(p.held))
	for name, h := range p.held {
		c := *h
		c.bindings = maps.Clone(h.bindings)
		out[name] = c
	}
	return out
}
