package swarmplatform

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"plug/swarmapi"
	"plug/tunnel"
)

// Maintain renews the heartbeat of the relays this agent holds every
// Options.Heartbeat, and sweeps at once, then every Options.SweepEvery,
// until ctx ends. It follows the engine's service events meanwhile, so
// that a change behind a held name is noticed at once, and keeps the
// records of runs (runs.go).
func (p *Platform) Maintain(ctx context.Context) error {
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		p.followPaths(ctx)
	}()
	defer func() { <-followed }()
	tended := make(chan struct{})
	go func() {
		defer close(tended)
		p.tendRecords(ctx)
	}()
	defer func() { <-tended }()
	p.sweepLogged(ctx)
	tunnel.Duties{Heartbeat: p.opts.Heartbeat, SweepEvery: p.opts.SweepEvery, Beat: p.renew, Sweep: p.sweepLogged}.Run(ctx)
	return nil
}

func (p *Platform) sweepLogged(ctx context.Context) {
	if err := p.Sweep(ctx); err != nil && ctx.Err() == nil {
		p.opts.Logf("sweep: %v", err)
	}
}

// renew writes a fresh heartbeat on every relay this agent holds, and
// tells the developer when a name was lost or its takeover undone by
// somebody else.
func (p *Platform) renew(ctx context.Context) {
	for name, h := range p.holdings() {
		p.renewOne(ctx, name, h)
	}
	p.renewLeased(ctx)
}

func (p *Platform) renewOne(ctx context.Context, name string, h holding) {
	defer p.lockName(name)()
	if p.relayHeld(name) != h.relayID {
		return // released meanwhile
	}
	var lost string // why the run lost the name
	moved := false  // the run reconnected through another agent, which holds it now
	err := p.opts.Client.UpdateService(ctx, h.relayID, func(s *swarmapi.Service, spec swarmapi.RawSpec) error {
		lost, moved = "", false
		switch l := leaseOf(s); {
		case !holdsAll(l, h):
			lost = fmt.Sprintf("%s was given back while this run still served it, and is now served by %s", name, l.Holder)
			return swarmapi.ErrNoUpdate
		case l.Task != p.opts.Task:
			moved = true
			return swarmapi.ErrNoUpdate
		}
		spec.SetLabel(labelHeartbeat, time.Now().UTC().Format(time.RFC3339))
		return nil
	})
	switch {
	case swarmapi.IsNotFound(err):
		lost = fmt.Sprintf("%s was given back while this run still served it (its relay service is gone): the name no longer reaches this run", name)
	case err != nil:
		p.opts.Logf("renewing the heartbeat of %s: %v", name, err)
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

// holdsAll reports whether lease l belongs to the run (and key) of h's
// bindings.
func holdsAll(l lease, h holding) bool {
	for _, b := range h.bindings {
		if !b.Holder.SameRun(l.Holder) {
			return false
		}
	}
	return true
}

// unparked reports whether the service id no longer carries plug's receipt
// or runs tasks again, but for plug's own waking of it (away.go).
func (p *Platform) unparked(ctx context.Context, id string) bool {
	s, err := p.opts.Client.Service(ctx, id)
	if err != nil {
		return swarmapi.IsNotFound(err)
	}
	if r, has, _ := receiptOf(s); !has || r.Awake {
		return !has // a woken service runs for plug (away.go)
	}
	if r := s.Spec.Mode.Replicated; r != nil {
		return r.Replicas != nil && *r.Replicas > 0
	}
	return s.Spec.TaskTemplate.Placement == nil || !slices.Contains(s.Spec.TaskTemplate.Placement.Constraints, parkedConstraint)
}

// notify tells every binding of h.
func (p *Platform) notify(h holding, kind tunnel.EventKind, text string) {
	p.opts.Logf("%s", text)
	for _, b := range h.bindings {
		if b.Notify != nil {
			b.Notify(tunnel.Event{Name: b.Name, Kind: kind, Text: text})
		}
	}
}

// Sweep gives back every name whose holder is gone: relays whose heartbeat
// is stale or whose agent task has ended are removed, restoring what they
// parked, and receipts left without a relay by such a holder are restored.
// Volume helpers and copies of services of such holders are removed. Any number of agents may
// sweep at once.
func (p *Platform) Sweep(ctx context.Context) error {
	var errs []error
	if err := p.sweepLeased(ctx); err != nil {
		errs = append(errs, err)
	}
	relays, err := p.opts.Client.Services(ctx, map[string][]string{"label": {labelRelay}})
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	mine := p.holdings()
	live := map[string]bool{} // relay service names still held
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
	parked, err := p.opts.Client.Services(ctx, map[string][]string{"label": {labelReceipt}})
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
			p.opts.Logf("swept: restored service %s, parked for %s by %s, from its receipt", s.Spec.Name, r.Name, r.Holder)
		}
	}
	return errors.Join(errs...)
}

// sweepRelay gives back the relay r of name under this agent's lock of
// the name, unless it was renewed meanwhile.
func (p *Platform) sweepRelay(ctx context.Context, r *swarmapi.Service, name, why string) error {
	defer p.lockName(name)()
	cur, err := p.opts.Client.Service(ctx, r.ID)
	if swarmapi.IsNotFound(err) {
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
	if age := time.Since(beat); age > p.opts.Stale {
		return false, fmt.Sprintf("renewed nothing for %s", age.Round(time.Second))
	}
	if task == "" {
		return true, ""
	}
	t, err := p.opts.Client.Task(ctx, task)
	switch {
	case swarmapi.IsNotFound(err):
		return false, fmt.Sprintf("its agent task %s is gone", task)
	case err != nil:
		return true, ""
	case t.Ended() || t.DesiredState != "running":
		return false, fmt.Sprintf("its agent task %s has ended (%s)", task, t.Status.State)
	}
	// A removed service's tasks look alive until the swarm gets to them.
	if _, err := p.opts.Client.Service(ctx, t.ServiceID); swarmapi.IsNotFound(err) {
		return false, fmt.Sprintf("the service of its agent task %s was removed", task)
	}
	return true, ""
}
