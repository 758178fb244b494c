package swarmplatform

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"plug/swarmapi"
	"plug/tunnel"
)

// Services of a run beside its relays — volume helpers (volume.go) and the
// copies of a service taken over personally (personal.go) — carry the
// run's lease as a relay does (labels plug.dev/holder, task, heartbeat),
// and a label saying what they are. The agent holding them renews their
// heartbeat; any agent's sweep removes those whose holder is gone.

// leasedKinds are the labels of the services that carry a lease beside
// relays, and what each is, for the log.
var leasedKinds = map[string]string{
	labelVolume: "volume helper",
	labelCopy:   "copy of a service taken over personally",
}

// holdLeased records that this agent holds the leased service name (or no
// longer).
func (p *Platform) holdLeased(name string, held bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if held {
		p.leased[name] = true
	} else {
		delete(p.leased, name)
	}
}

// heldLeased are the leased services this agent holds, sorted.
func (p *Platform) heldLeased() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	names := make([]string, 0, len(p.leased))
	for name := range p.leased {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// renewLeased writes a fresh heartbeat on the leased services this agent
// holds.
func (p *Platform) renewLeased(ctx context.Context) {
	for _, name := range p.heldLeased() {
		err := p.opts.Client.UpdateService(ctx, name, func(_ *swarmapi.Service, spec swarmapi.RawSpec) error {
			spec.SetLabel(labelHeartbeat, time.Now().UTC().Format(time.RFC3339))
			return nil
		})
		if err != nil && !swarmapi.IsNotFound(err) {
			p.opts.Logf("%s: renewing the heartbeat: %v", name, err)
		}
	}
}

// sweepLeased removes the leased services whose holder is gone: their
// agent's task has ended, or their heartbeat is stale.
func (p *Platform) sweepLeased(ctx context.Context) error {
	held := p.heldLeased()
	var errs []error
	for label, kind := range leasedKinds {
		services, err := p.opts.Client.Services(ctx, map[string][]string{"label": {label}})
		if err != nil {
			errs = append(errs, fmt.Errorf("listing the %ss: %w", kind, err))
			continue
		}
		for i := range services {
			s := &services[i]
			if slices.Contains(held, s.Spec.Name) {
				continue
			}
			l := leaseOf(s)
			ok, why := p.alive(ctx, l.Task, l.Heartbeat)
			if ok {
				continue
			}
			if err := p.opts.Client.RemoveService(ctx, s.ID); err != nil && !swarmapi.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("removing the %s %s: %w", kind, s.Spec.Name, err))
				continue
			}
			p.opts.Logf("swept: removed the %s %s (%s): %s held it and %s", kind, s.Spec.Name, tunnel.PeerText(s.Spec.Labels[label]), l.Holder, why)
		}
	}
	return errors.Join(errs...)
}
