package swarmplatform

import (
	"context"
	"fmt"
	"time"

	"plug/swarmapi"
	"plug/tunnel"
)

// A parked service runs no task, so nothing deployed would answer the
// callers of a name while the run holding it cannot: while it is away (its
// connection dropped, within the agent's grace). The agent says so in the
// run's record (tunnel.RunRecord.Away), which PutRun hands to noteAway:
// the service is woken, its saved fields put back with its receipt left
// on it (receipt.Awake), and its tasks answer the name beside the relay,
// which sends the callers it gets to them too (DialDeployed waits up to
// wakeWait for one to run). When the run is back the service is parked
// again, the saved fields read anew. A give-back restores it from the
// receipt, woken or not.

// wakeWait bounds how long a caller the relay brings while a woken
// service starts its tasks waits for one of them to run.
const wakeWait = 5 * time.Second

// noteAway wakes, or parks again, each service this agent parked for a
// name of rec's run, when rec says the run went away or came back. The
// engine is asked in the background: PutRun does not wait for it.
func (p *Platform) noteAway(ctx context.Context, rec tunnel.RunRecord) {
	for _, n := range rec.Names {
		if n.Mode == tunnel.ModeParked && p.wantAwake(n.Name, rec) {
			go p.setAwake(context.WithoutCancel(ctx), n.Name)
		}
	}
}

// wantAwake records whether the service parked for name is to run, as
// rec says of its run; it reports whether that changed. Names this agent
// does not hold for rec's run and key are left alone.
func (p *Platform) wantAwake(name string, rec tunnel.RunRecord) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.held[name]
	if h == nil || h.parked == "" || h.personal || h.awake == rec.Away {
		return false // a personal takeover's copy runs all along
	}
	for _, b := range h.bindings {
		if b.Holder.Run != rec.Run || b.Holder.Developer != rec.Key {
			return false
		}
	}
	h.awake = rec.Away
	return true
}

// awake reports whether the service parked for name is woken, or being
// woken, for its run is away.
func (p *Platform) awake(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.held[name]
	return h != nil && h.awake
}

// setAwake brings the service parked for name to the state wantAwake
// recorded last, under the name's lock; a name given back meanwhile is
// left alone.
func (p *Platform) setAwake(ctx context.Context, name string) {
	defer p.lockName(name)()
	p.mu.Lock()
	h := p.held[name]
	var parked string
	var awake bool
	if h != nil {
		parked, awake = h.parked, h.awake
	}
	p.mu.Unlock()
	if parked == "" {
		return
	}
	if err := p.applyAwake(ctx, name, parked, awake); err != nil {
		p.opts.Logf("%s: %v", name, err)
	}
}

// applyAwake wakes the service id parked for name (awake), or parks it
// again, if it carries the receipt of name's takeover and is not so
// already.
func (p *Platform) applyAwake(ctx context.Context, name, id string, awake bool) error {
	changed := false
	err := p.opts.Client.UpdateService(ctx, id, func(s *swarmapi.Service, spec swarmapi.RawSpec) error {
		changed = false
		r, has, err := receiptOf(s)
		if err != nil {
			return err
		}
		if !has || r.Relay != takeoverRelayName(name) || r.Awake == awake {
			return swarmapi.ErrNoUpdate
		}
		changed = true
		r.Awake = awake
		if !awake {
			parkSpec(s, spec, r)
			return nil
		}
		if err := putBack(spec, r.Saved); err != nil {
			return err
		}
		spec.SetLabel(labelReceipt, r.label())
		return nil
	})
	switch {
	case err != nil && awake:
		return fmt.Errorf("the run is away, but its parked service cannot be started again meanwhile (%w): its callers are refused until the run is back", err)
	case err != nil:
		return fmt.Errorf("the run is back, but its parked service, started while it was away, cannot be parked again (%w): its tasks answer the name beside the run", err)
	case changed && awake:
		p.opts.Logf("%s: the run holding it is away: its parked service runs again meanwhile, its receipt kept", name)
	case changed:
		p.opts.Logf("%s: the run holding it is back: its service is parked again", name)
	}
	return nil
}
