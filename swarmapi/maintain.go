package swarmapi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"plug/tunnel"
)

// Maintain renews the heartbeat of the relays this agent holds every
// heartbeatEvery, and sweeps at once, then every sweepEvery, until ctx
// ends. It follows the engine's service events meanwhile, so that a
// change behind a held name is noticed at once.
func (p *Platform) Maintain(ctx context.Context) error {
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		p.followPaths(ctx)
	}()
	defer func() { <-followed }()
	p.sweepLogged(ctx)
	beat := time.NewTicker(heartbeatEvery)
	defer beat.Stop()
	sweep := time.NewTicker(sweepEvery)
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-beat.C:
			p.renew(ctx)
		case <-sweep.C:
			p.sweepLogged(ctx)
		}
	}
}

func (p *Platform) sweepLogged(ctx context.Context) {
	if err := p.Sweep(ctx); err != nil && ctx.Err() == nil {
		p.cfg.Logf("sweep: %v", err)
	}
}

// renew writes a fresh heartbeat on every relay this agent holds, and
// tells the developer when a name was lost or its takeover undone by
// somebody else.
func (p *Platform) renew(ctx context.Context) {
	for name, h := range p.holdings() {
		p.renewOne(ctx, name, h)
	}
}

func (p *Platform) renewOne(ctx context.Context, name string, h holding) {
	defer p.lockName(name)()
	if p.relayHeld(name) != h.relayID {
		return // released meanwhile
	}
	var lost string // why the run lost the name
	moved := false  // the run reconnected through another agent, which holds it now
	err := p.cfg.Client.UpdateService(ctx, h.relayID, func(s *Service, spec RawSpec) error {
		lost, moved = "", false
		switch l := leaseOf(s); {
		case !holdsAll(l, h):
			lost = fmt.Sprintf("%s was given back while this run still served it, and is now served by %s", name, l.Holder)
			return ErrNoUpdate
		case l.Task != p.cfg.Task:
			moved = true
			return ErrNoUpdate
		}
		spec.SetLabel(labelHeartbeat, time.Now().UTC().Format(time.RFC3339))
		return nil
	})
	switch {
	case IsNotFound(err):
		lost = fmt.Sprintf("%s was given back while this run still served it (its relay service is gone): the name no longer reaches this run", name)
	case err != nil:
		p.cfg.Logf("renewing the heartbeat of %s: %v", name, err)
		return
	}
	if lost != "" || moved {
		p.forget(name)
		if lost != "" {
			p.notify(h, tunnel.EventEnded, lost)
		}
		return
	}
	p.warnIfUnparked(ctx, name, h)
}

// holdsAll reports whether lease l belongs to the run of h's bindings.
func holdsAll(l lease, h holding) bool {
	for _, b := range h.bindings {
		if b.Holder.Run != l.Holder.Run {
			return false
		}
	}
	return true
}

// unparked reports whether the service id no longer carries plug's receipt
// or runs tasks again.
func (p *Platform) unparked(ctx context.Context, id string) bool {
	s, err := p.cfg.Client.Service(ctx, id)
	if err != nil {
		return IsNotFound(err)
	}
	if _, has, _ := receiptOf(s); !has {
		return true
	}
	if r := s.Spec.Mode.Replicated; r != nil {
		return r.Replicas != nil && *r.Replicas > 0
	}
	return s.Spec.TaskTemplate.Placement == nil || !slices.Contains(s.Spec.TaskTemplate.Placement.Constraints, parkedConstraint)
}

// notify tells every binding of h.
func (p *Platform) notify(h holding, kind tunnel.EventKind, text string) {
	p.cfg.Logf("%s", text)
	for _, b := range h.bindings {
		if b.Notify != nil {
			b.Notify(tunnel.Event{Name: b.Name, Kind: kind, Text: text})
		}
	}
}

// Sweep gives back every name whose holder is gone: relays whose heartbeat
// is stale or whose agent task has ended are removed, restoring what they
// parked, and receipts left without a relay by such a holder are restored.
// Any number of agents may sweep at once.
func (p *Platform) Sweep(ctx context.Context) error {
	relays, err := p.cfg.Client.Services(ctx, map[string][]string{"label": {labelRelay}})
	if err != nil {
		return err
	}
	mine := p.holdings()
	live := map[string]bool{} // relay service names still held
	var errs []error
	for i := range relays {
		r := &relays[i]
		name := r.Spec.Labels[labelRelay]
		if h, ok := mine[name]; ok && h.relayID == r.ID {
			live[r.Spec.Name] = true
			continue
		}
		l := leaseOf(r)
		ok, why := p.alive(ctx, l.Task, l.Heartbeat)
		if ok {
			live[r.Spec.Name] = true
			continue
		}
		if err := p.sweepRelay(ctx, r, name, fmt.Sprintf("swept: %s held it and %s", l.Holder, why)); err != nil {
			errs = append(errs, err)
		}
	}
	parked, err := p.cfg.Client.Services(ctx, map[string][]string{"label": {labelReceipt}})
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for i := range parked {
		s := &parked[i]
		r, has, err := receiptOf(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !has || live[r.Relay] {
			continue
		}
		if ok, _ := p.alive(ctx, r.Task, r.Parked); ok {
			continue // a takeover whose relay is still starting
		}
		if restored, err := p.restore(ctx, s.ID, r.Relay); err != nil {
			errs = append(errs, err)
		} else if restored {
			p.cfg.Logf("swept: restored service %s, parked for %s by %s, from its receipt", s.Spec.Name, r.Name, r.Holder)
		}
	}
	return errors.Join(errs...)
}

// sweepRelay gives back the relay r of name under this agent's lock of
// the name, unless it was renewed meanwhile.
func (p *Platform) sweepRelay(ctx context.Context, r *Service, name, why string) error {
	defer p.lockName(name)()
	cur, err := p.cfg.Client.Service(ctx, r.ID)
	if IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	l := leaseOf(cur)
	if ok, _ := p.alive(ctx, l.Task, l.Heartbeat); ok {
		return nil
	}
	return p.giveBack(ctx, cur, why)
}

// alive reports whether a holder whose agent runs as task and last renewed
// at beat still holds; when not, it says why. An engine that cannot answer
// counts as alive: the sweep acts only on certainty.
func (p *Platform) alive(ctx context.Context, task string, beat time.Time) (bool, string) {
	if age := time.Since(beat); age > staleAfter {
		return false, fmt.Sprintf("renewed nothing for %s", age.Round(time.Second))
	}
	if task == "" {
		return true, ""
	}
	t, err := p.cfg.Client.Task(ctx, task)
	switch {
	case IsNotFound(err):
		return false, fmt.Sprintf("its agent task %s is gone", task)
	case err != nil:
		return true, ""
	case t.Ended() || t.DesiredState != "running":
		return false, fmt.Sprintf("its agent task %s has ended (%s)", task, t.Status.State)
	}
	// A removed service's tasks look alive until the swarm gets to them.
	if _, err := p.cfg.Client.Service(ctx, t.ServiceID); IsNotFound(err) {
		return false, fmt.Sprintf("the service of its agent task %s was removed", task)
	}
	return true, ""
}
