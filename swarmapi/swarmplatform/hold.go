package swarmplatform

import (
	"maps"

	"plug/tunnel"
)

// holding is a name this agent serves: its relay and the bindings on it.
type holding struct {
	relayID  string
	parked   string // ID of the parked service, if the name was taken over
	bindings map[relayPort]tunnel.Binding
	warned   bool // the developer was told the takeover was reverted
	awake    bool // its run is away: the parked service is to run meanwhile (away.go)
	personal bool // taken over personally: a copy of the parked service runs (personal.go)
}

// addBinding records that this agent serves b through the relay relayID
// (which parked the service parked, if not empty).
func (p *Platform) addBinding(b tunnel.Binding, relayID, parked string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.held[b.Name]
	if h == nil || h.relayID != relayID {
		h = &holding{relayID: relayID, parked: parked, bindings: map[relayPort]tunnel.Binding{}}
		p.held[b.Name] = h
	}
	h.bindings[portOf(b)] = b
}

// dropBinding forgets b's port of a name this agent serves, and the name
// when that was its last port.
func (p *Platform) dropBinding(b tunnel.Binding) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h := p.held[b.Name]; h != nil {
		delete(h.bindings, portOf(b))
		if len(h.bindings) == 0 {
			delete(p.held, b.Name)
		}
	}
}

// markPersonal records that name was taken over personally.
func (p *Platform) markPersonal(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h := p.held[name]; h != nil {
		h.personal = true
	}
}

// markWarned records that the developer was told the takeover of name was
// reverted, so they are told once: it reports whether this is the first
// time.
func (p *Platform) markWarned(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.held[name]
	first := h != nil && !h.warned
	if first {
		h.warned = true
	}
	return first
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
