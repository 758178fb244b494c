package swarmapi

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"plug/tunnel"
)

// Release gives b.Name:b.Port back. When the run serves other ports of the
// name, only this one leaves the relay; otherwise the relay is removed and
// a parked service is restored exactly from its receipt. A name not held by
// b's run through this agent is left alone: another run holds it, or the
// run moved to another agent, which holds it now. When the engine fails,
// the name is left for the sweep, which gives it back once its heartbeat,
// no longer renewed, is stale.
func (p *Platform) Release(ctx context.Context, b tunnel.Binding) error {
	if checkBinding(b) != nil {
		return nil // never served
	}
	defer p.lockName(b.Name)()
	relay, err := p.relayFor(ctx, b.Name)
	if err != nil {
		return err
	}
	if relay == nil {
		p.forget(b.Name)
		return p.restoreOrphans(ctx, b)
	}
	if l := leaseOf(relay); l.Holder.Run != b.Holder.Run || l.Task != p.cfg.Task {
		p.forget(b.Name)
		return nil
	}
	ports := parsePorts(relay.Spec.Labels[labelPorts])
	delete(ports, b.Port)
	if len(ports) > 0 {
		return p.dropPort(ctx, relay, b, ports)
	}
	p.forget(b.Name)
	if err := p.giveBack(ctx, relay, "released by "+b.Holder.Run); err != nil {
		return fmt.Errorf("giving %s back: %w; any agent's sweep gives it back once its heartbeat is %s old", b.Name, err, staleAfter)
	}
	return nil
}

// dropPort leaves the relay forwarding ports only.
func (p *Platform) dropPort(ctx context.Context, relay *Service, b tunnel.Binding, ports map[int]int) error {
	args, _ := json.Marshal(p.relayArgs(ports))
	err := p.cfg.Client.UpdateService(ctx, relay.ID, func(_ *Service, spec RawSpec) error {
		spec.SetLabel(labelPorts, formatPorts(ports))
		return spec.Set(args, "TaskTemplate", "ContainerSpec", "Args")
	})
	if err == nil {
		p.dropBinding(b.Name, b.Port)
	}
	return err
}

// giveBack restores the service relay parked, if any, then removes relay.
// Restoring first means a failure leaves the relay, and its receipt, for
// the sweep to finish.
func (p *Platform) giveBack(ctx context.Context, relay *Service, why string) error {
	ctx = context.WithoutCancel(ctx) // half an undo is worse than a late one
	name := relay.Spec.Labels[labelRelay]
	if parked := relay.Spec.Labels[labelParked]; parked != "" {
		restored, err := p.restore(ctx, parked, relay.Spec.Name)
		if err != nil && !IsNotFound(err) {
			return err
		}
		if restored {
			p.cfg.Logf("restored the service parked for %s from its receipt (%s)", name, why)
		}
	}
	if err := p.cfg.Client.RemoveService(ctx, relay.ID); err != nil && !IsNotFound(err) {
		return err
	}
	p.cfg.Logf("gave %s back: removed relay service %s (%s)", name, relay.Spec.Name, why)
	return nil
}

// restore puts the service id back exactly as its receipt says, if the
// receipt is the one relay's takeover wrote; it reports whether it did.
func (p *Platform) restore(ctx context.Context, id, relay string) (bool, error) {
	restored := false
	err := p.cfg.Client.UpdateService(ctx, id, func(s *Service, spec RawSpec) error {
		restored = false
		r, has, err := receiptOf(s)
		if err != nil {
			return err
		}
		if !has || r.Relay != relay {
			return ErrNoUpdate
		}
		for path, v := range r.Saved {
			keys := strings.Split(path, "/")
			if string(v) == "null" {
				spec.Delete(keys...)
			} else if err := spec.Set(v, keys...); err != nil {
				return err
			}
		}
		spec.DeleteLabel(labelReceipt)
		restored = true
		return nil
	})
	return restored, err
}

// restoreOrphans restores what b's run parked for b.Name and whose relay is
// gone: the agent stopped in the middle of a takeover, or somebody removed
// the relay.
func (p *Platform) restoreOrphans(ctx context.Context, b tunnel.Binding) error {
	parked, err := p.cfg.Client.Services(ctx, map[string][]string{"label": {labelReceipt}})
	if err != nil {
		return err
	}
	for i := range parked {
		r, has, err := receiptOf(&parked[i])
		if err != nil || !has || r.Name != b.Name || r.Holder.Run != b.Holder.Run || r.Task != p.cfg.Task {
			continue
		}
		if _, err := p.restore(ctx, parked[i].ID, r.Relay); err != nil {
			return err
		}
		p.cfg.Logf("restored %s, parked by %s, whose relay is gone", parked[i].Spec.Name, b.Holder.Run)
	}
	return nil
}
