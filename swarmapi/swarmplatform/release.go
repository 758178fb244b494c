package swarmplatform

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"plug/swarmapi"
	"plug/tunnel"
)

// Release gives b.Name:b.Port back. When the run serves other ports of the
// name, only this one leaves the relay; otherwise the relay is removed and
// a parked service is restored exactly from its receipt. A name not held by
// b's run through this agent is left alone: another run holds it, or the
// run moved to another agent, which holds it now. When the engine fails,
// this agent lets go of the port all the same and the name is left for
// the sweep, which gives it back once its heartbeat, no longer renewed,
// is stale.
func (p *Platform) Release(ctx context.Context, b tunnel.Binding) error {
	if checkBinding(b) != nil {
		return nil // never served
	}
	defer p.lockName(b.Name)()
	if err := p.release(ctx, b); err != nil {
		p.dropBinding(b)
		return fmt.Errorf("giving %s back: %w; any agent's sweep gives it back once its heartbeat is %s old", b.Name, err, p.opts.Stale)
	}
	return nil
}

func (p *Platform) release(ctx context.Context, b tunnel.Binding) error {
	relay, err := p.relayFor(ctx, b.Name)
	if err != nil {
		return err
	}
	if relay == nil {
		p.forget(b.Name)
		return p.restoreOrphans(ctx, b)
	}
	if l := leaseOf(relay); !l.Holder.SameRun(b.Holder) || l.Task != p.opts.Task {
		p.forget(b.Name)
		return nil
	}
	ports := parsePorts(relay.Spec.Labels[labelPorts])
	delete(ports, portOf(b))
	if len(ports) > 0 {
		return p.dropPort(ctx, relay, b, ports)
	}
	p.forget(b.Name)
	return p.giveBack(ctx, relay, "released by "+b.Holder.Run)
}

// dropPort leaves the relay forwarding ports only.
func (p *Platform) dropPort(ctx context.Context, relay *swarmapi.Service, b tunnel.Binding, ports map[relayPort]int) error {
	args, _ := json.Marshal(p.relayArgs(ports))
	err := p.opts.Client.UpdateService(ctx, relay.ID, func(_ *swarmapi.Service, spec swarmapi.RawSpec) error {
		spec.SetLabel(labelPorts, formatPorts(ports))
		return spec.Set(args, "TaskTemplate", "ContainerSpec", "Args")
	})
	if err == nil {
		p.dropBinding(b)
	}
	return err
}

// giveBack restores the service relay parked, if any, then removes relay,
// make before break: the relay goes once the restored service runs a task
// again (at most handBackWait), and until then callers reach the relay
// and, through it, the run or the restored tasks; the restored tasks are
// read before the relay goes, so that no caller that still reaches it is
// refused on the list of a parked service. Restoring first means a
// failure leaves the relay, and its receipt, for the sweep to finish. The
// copy a personal takeover ran goes last.
func (p *Platform) giveBack(ctx context.Context, relay *swarmapi.Service, why string) error {
	ctx = context.WithoutCancel(ctx) // half an undo is worse than a late one
	name := relay.Spec.Labels[labelRelay]
	if parked := relay.Spec.Labels[labelParked]; parked != "" {
		restored, err := p.restore(ctx, parked, relay.Spec.Name)
		if err != nil && !swarmapi.IsNotFound(err) {
			return err
		}
		if restored {
			p.opts.Logf("restored the service parked for %s from its receipt (%s)", name, why)
			if err := p.waitRunning(ctx, parked); err != nil {
				p.opts.Logf("%s: the restored service runs no task yet (%v); its relay goes anyway", name, err)
			}
			p.readDeployed(ctx, name)
		}
	}
	if err := p.opts.Client.RemoveService(ctx, relay.ID); err != nil && !swarmapi.IsNotFound(err) {
		return err
	}
	p.opts.Logf("gave %s back: removed relay service %s (%s)", name, relay.Spec.Name, why)
	return p.removeCopy(ctx, name)
}

// restore puts the service id back exactly as its receipt says, if the
// receipt is the one relay's takeover wrote; it reports whether it did.
func (p *Platform) restore(ctx context.Context, id, relay string) (bool, error) {
	restored := false
	err := p.opts.Client.UpdateService(ctx, id, func(s *swarmapi.Service, spec swarmapi.RawSpec) error {
		restored = false
		r, has, err := receiptOf(s)
		if err != nil {
			return err
		}
		if !has || r.Relay != relay {
			return swarmapi.ErrNoUpdate
		}
		if err := putBack(spec, r.Saved); err != nil {
			return err
		}
		spec.DeleteLabel(labelReceipt)
		restored = true
		return nil
	})
	return restored, err
}

// putBack sets every field of spec a receipt saved (Saved) to its saved
// value, deleting those that were absent.
func putBack(spec swarmapi.RawSpec, saved map[string]json.RawMessage) error {
	for path, v := range saved {
		keys := strings.Split(path, "/")
		if string(v) == "null" {
			spec.Delete(keys...)
		} else if err := spec.Set(v, keys...); err != nil {
			return err
		}
	}
	return nil
}

// restoreOrphans restores what b's run parked for b.Name and whose relay is
// gone: the agent stopped in the middle of a takeover, or somebody removed
// the relay.
func (p *Platform) restoreOrphans(ctx context.Context, b tunnel.Binding) error {
	parked, err := p.opts.Client.Services(ctx, map[string][]string{"label": {labelReceipt}})
	if err != nil {
		return err
	}
	for i := range parked {
		r, has, err := receiptOf(&parked[i])
		if err != nil || !has || r.Name != b.Name || !r.Holder.SameRun(b.Holder) || r.Task != p.opts.Task {
			continue
		}
		if _, err := p.restore(ctx, parked[i].ID, r.Relay); err != nil {
			return err
		}
		p.opts.Logf("restored %s, parked by %s, whose relay is gone", parked[i].Spec.Name, b.Holder.Run)
	}
	return nil
}
