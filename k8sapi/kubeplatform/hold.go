package kubeplatform

import (
	"maps"
	"slices"

	"plug/tunnel"
)

// holding is a name this agent serves for one run.
type holding struct {
	run      string
	bindings map[int]tunnel.Binding // by Service port
	reverted bool                   // the developer was told it was changed back
}

func (p *Platform) hold(b tunnel.Binding) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.held[b.Name]
	if h == nil || h.run != b.Holder.Run {
		h = &holding{run: b.Holder.Run, bindings: map[int]tunnel.Binding{}}
		p.held[b.Name] = h
	}
	h.bindings[b.Port] = b
	delete(p.pending, b.Name)
}

// forget stops holding port of name here (every port when port is 0).
func (p *Platform) forget(name string, port int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.held[name]
	if h == nil {
		return
	}
	if port == 0 {
		clear(h.bindings)
	}
	delete(h.bindings, port)
	if len(h.bindings) == 0 {
		delete(p.held, name)
	}
}

// holding returns a copy of what this agent holds of name, or nil.
func (p *Platform) holdingOf(name string) *holding {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.held[name]
	if h == nil {
		return nil
	}
	c := *h
	c.bindings = maps.Clone(h.bindings)
	return &c
}

func (p *Platform) heldNames() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.held))
}

// holds reports whether this agent holds name for the run of r.
func (p *Platform) holds(name string, r receipt) bool {
	h := p.holdingOf(name)
	return h != nil && h.run == r.Holder.Run && r.Pod == p.pod
}

// servesHere are the ports of name this agent serves.
func (p *Platform) servesHere(name string) []servedPort {
	h := p.holdingOf(name)
	if h == nil {
		return nil
	}
	var out []servedPort
	for _, port := range slices.Sorted(maps.Keys(h.bindings)) {
		out = append(out, servedPort{Port: port, Target: h.bindings[port].Target})
	}
	return out
}

// markReverted records that the developer was told name was changed back;
// it reports whether this is the first time.
func (p *Platform) markReverted(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.held[name]
	if h == nil || h.reverted {
		return false
	}
	h.reverted = true
	return true
}

// lost stops holding name and tells its run why.
func (p *Platform) lost(name, why string) {
	p.mu.Lock()
	h := p.held[name]
	delete(p.held, name)
	p.mu.Unlock()
	if h == nil {
		return
	}
	p.logf("%s: %s", name, why)
	notify(h, tunnel.Event{Name: name, Kind: tunnel.EventEnded, Text: why})
}

// notify tells the run of h about ev, through the Notify of its first
// binding that has one.
func notify(h *holding, ev tunnel.Event) {
	for _, port := range slices.Sorted(maps.Keys(h.bindings)) {
		if n := h.bindings[port].Notify; n != nil {
			n(ev)
			return
		}
	}
}

func (p *Platform) kickGuard() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}
