package kubeplatform

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"plug/k8sapi"
	"plug/tunnel"
)

// holding is a name this agent serves for one run.
type holding struct {
	owner    tunnel.Holder              // the run, and the key it belongs to
	bindings map[portKey]tunnel.Binding // by Service port
	reverted bool                       // the developer was told it was changed back
}

func (p *Platform) hold(b tunnel.Binding) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.held[b.Name]
	if h == nil || !h.owner.SameRun(b.Holder) {
		h = &holding{owner: b.Holder, bindings: map[portKey]tunnel.Binding{}}
		p.held[b.Name] = h
	}
	h.bindings[keyOf(b)] = b
	delete(p.pending, b.Name)
}

// forget stops holding port k of name here (every port when k.Port is 0).
func (p *Platform) forget(name string, k portKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.held[name]
	if h == nil {
		return
	}
	if k.Port == 0 {
		clear(h.bindings)
	}
	delete(h.bindings, k)
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

// holds reports whether this agent holds name for the run (and key) of r.
func (p *Platform) holds(name string, r receipt) bool {
	h := p.holdingOf(name)
	return h != nil && h.owner.SameRun(r.Holder.tunnel()) && r.Pod == p.pod
}

// servesHere are the ports of name this agent serves.
func (p *Platform) servesHere(name string) []servedPort {
	h := p.holdingOf(name)
	if h == nil {
		return nil
	}
	var out []servedPort
	for _, k := range slices.SortedFunc(maps.Keys(h.bindings), comparePortKeys) {
		out = append(out, servedPort{Port: k.Port, Target: h.bindings[k].Target, UDP: k.UDP})
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
	for _, k := range slices.SortedFunc(maps.Keys(h.bindings), comparePortKeys) {
		if n := h.bindings[k].Notify; n != nil {
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

var _ tunnel.HolderMover = (*Platform)(nil)

// MoveHolder makes to's run the holder of what from's run holds of
// from.Name on this agent: the receipt on the Service names it from now
// on, conditional on the version read; see tunnel.HolderMover.
func (p *Platform) MoveHolder(ctx context.Context, from, to tunnel.Binding) error {
	if to.Holder.Agent == "" {
		to.Holder.Agent = p.pod
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	p.moving.Lock()
	defer p.moving.Unlock()
	var notHeld error // not worth retrying
	err := retryTemporary(ctx, func() error {
		return k8sapi.RetryOnConflict(ctx, func() error {
			svc, err := p.c.Services(p.ns).Get(ctx, from.Name)
			if err != nil {
				return err
			}
			r, has, err := receiptOf(svc)
			if err != nil || !has || !r.Holder.tunnel().SameRun(from.Holder) || r.Pod != p.pod {
				notHeld = fmt.Errorf("%s is no longer held by %s on this agent", from.Name, from.Holder)
				return nil
			}
			r.Holder = holderOf(to.Holder)
			_, err = p.c.Services(p.ns).JSONPatch(ctx, from.Name, []k8sapi.PatchOp{ifVersion(svc),
				setAnnotations(svc, map[string]string{AnnotationReceipt: r.encode(), AnnotationHeartbeat: heartbeatNow()})})
			return err
		})
	})
	if err == nil {
		err = notHeld
	}
	if err != nil {
		return fmt.Errorf("handing %s to %s: %w", from.Name, to.Holder, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if h := p.held[from.Name]; h != nil && h.owner.SameRun(from.Holder) {
		h.owner = to.Holder
		for port, b := range h.bindings {
			b.Holder, b.Notify = to.Holder, to.Notify
			h.bindings[port] = b
		}
	}
	return nil
}

// reheld reports whether what this agent holds of name passed, meanwhile,
// to the run receipt r names (MoveHolder), rather than being lost.
func (p *Platform) reheld(name string, r receipt) bool {
	p.moving.Lock()
	defer p.moving.Unlock()
	h := p.holdingOf(name)
	return h != nil && h.owner.SameRun(r.Holder.tunnel())
}
