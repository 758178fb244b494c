package swarmplatform

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"plug/swarmapi"
	"plug/tunnel"
)

// parkedConstraint is the placement constraint that parks a global service:
// node IDs never contain a dot, so no node matches it.
const parkedConstraint = "node.id==parked.by.plug"

// Serve makes b.Name:b.Port on the agent's networks reach this agent's
// b.Target. A name no service answers to gets a relay service of that name.
// A deployed service of that name (or network alias) is taken over, make
// before break: a relay takes its names beside it and runs, then the
// service is parked — its receipt goes on it, it is scaled to zero (a
// global service gets a placement constraint no node matches). Serving
// more ports of a name the run already serves adds them to its relay; a name
// another run, or the same run id of another key, holds is refused with a
// *tunnel.HeldError.
func (p *Platform) Serve(ctx context.Context, b tunnel.Binding) (tunnel.Served, error) {
	if err := checkBinding(b); err != nil {
		return tunnel.Served{}, err
	}
	if p.opts.Address == "" || len(p.opts.Networks) == 0 {
		return tunnel.Served{}, tunnel.Refused(b.Name, "this agent is on no overlay network, so it cannot put %s on one: attach it to the application's network (docker service update --network-add NETWORK plug_agent)", b.Name)
	}
	defer p.lockName(b.Name)()

	relay, err := p.relayFor(ctx, b.Name)
	if err != nil {
		return tunnel.Served{}, err
	}
	if relay != nil {
		l := leaseOf(relay)
		if l.Holder.SameRun(b.Holder) {
			return p.addPort(ctx, relay, b)
		}
		if ok, _ := p.alive(ctx, l.Task, l.Heartbeat); ok {
			return tunnel.Served{}, &tunnel.HeldError{Name: b.Name, Holder: l.Holder}
		}
		if err := p.giveBack(ctx, relay, "its holder is gone"); err != nil {
			return tunnel.Served{}, err
		}
	}
	svc, err := p.deployed(ctx, b.Name)
	if err != nil {
		return tunnel.Served{}, err
	}
	if svc == nil {
		return p.serveNew(ctx, b)
	}
	return p.takeOver(ctx, svc, b)
}

// newLease is the lease of a relay this agent creates or renews for b.
func (p *Platform) newLease(b tunnel.Binding) lease {
	return lease{Holder: b.Holder, Task: p.opts.Task, Heartbeat: time.Now()}
}

// serveNew creates the relay service named b.Name.
func (p *Platform) serveNew(ctx context.Context, b tunnel.Binding) (tunnel.Served, error) {
	plan := relayPlan{Name: b.Name, Service: b.Name, Ports: map[relayPort]int{portOf(b): b.Target}, Lease: p.newLease(b)}
	id, err := p.startRelay(ctx, plan)
	if swarmapi.IsConflict(err) {
		// Another agent created it between our look and our create.
		if relay, _ := p.relayFor(ctx, b.Name); relay != nil {
			return tunnel.Served{}, &tunnel.HeldError{Name: b.Name, Holder: leaseOf(relay).Holder}
		}
	}
	if err != nil {
		return tunnel.Served{}, err
	}
	p.addBinding(b, id, "")
	p.forgetDeployed(b.Name)
	p.opts.Logf("served new name %s:%d for %s (relay service %s)", b.Name, b.Port, b.Holder, b.Name)
	return tunnel.Served{Detail: fmt.Sprintf("%s:%d reaches this session on %s", b.Name, b.Port, p.networkNames())}, nil
}

// takeOver gives svc's names to a relay, and parks svc once the relay
// runs: until then callers reach svc's tasks, beside the relay, and those
// the relay brings here go on to them while the run's process does not
// answer yet (DialDeployed). A relay that starts but whose service cannot
// be parked is removed again. A crash in between leaves a relay that names
// the service it was for (labelParked), which the sweep removes; restoring
// a service without a receipt changes nothing.
func (p *Platform) takeOver(ctx context.Context, svc *swarmapi.Service, b tunnel.Binding) (tunnel.Served, error) {
	if b.NoTakeover {
		return tunnel.Served{}, tunnel.ErrTakeoverNotAllowed
	}
	if err := p.takeable(ctx, svc, b); err != nil {
		return tunnel.Served{}, err
	}
	deployed := svc.ID
	if b.Filter != "" {
		id, err := p.startCopy(ctx, svc, b)
		if err != nil {
			return tunnel.Served{}, err
		}
		deployed = id
	}
	p.noteDeployed(b.Name, deployed)
	dropCopy := func() {
		if b.Filter != "" {
			if err := p.removeCopy(context.WithoutCancel(ctx), b.Name); err != nil {
				p.opts.Logf("%s: %v (the sweep retries)", b.Name, err)
			}
		}
	}
	r := receipt{Name: b.Name, Relay: takeoverRelayName(b.Name), Holder: b.Holder, Task: p.opts.Task, Parked: time.Now()}
	plan := relayPlan{
		Name: b.Name, Service: r.Relay, Parked: svc.ID,
		Aliases: answersTo(svc, b.Name), Networks: p.attachedNetworks(ctx, svc),
		Ports: map[relayPort]int{portOf(b): b.Target}, Lease: p.newLease(b),
	}
	id, err := p.startRelay(ctx, plan)
	if err != nil {
		dropCopy()
		return tunnel.Served{}, err
	}
	err = p.opts.Client.UpdateService(ctx, svc.ID, func(s *swarmapi.Service, spec swarmapi.RawSpec) error {
		if other, has, _ := receiptOf(s); has && !other.Holder.SameRun(b.Holder) {
			return &tunnel.HeldError{Name: b.Name, Holder: other.Holder}
		}
		return park(s, spec, r)
	})
	if err != nil {
		if rerr := p.opts.Client.RemoveService(context.WithoutCancel(ctx), id); rerr != nil && !swarmapi.IsNotFound(rerr) {
			err = fmt.Errorf("%w; removing the relay %s failed too (%v): the sweep retries", err, r.Relay, rerr)
		}
		dropCopy()
		return tunnel.Served{}, err
	}
	p.opts.Logf("parked service %s for %s (receipt on the service)", svc.Spec.Name, b.Holder)
	p.addBinding(b, id, svc.ID)
	if b.Filter != "" {
		p.markPersonal(b.Name)
	}
	p.opts.Logf("%s:%d now reaches %s through relay service %s", b.Name, b.Port, b.Holder, r.Relay)
	if e, ok := stackNotice(svc, b.Name); ok && b.Notify != nil {
		b.Notify(e)
	}

	detail := fmt.Sprintf("service %s (%s) is parked for the session; %s:%d reaches this session on %s",
		svc.Spec.Name, modeText(svc), b.Name, b.Port, p.networkNames())
	if b.Filter != "" {
		detail += fmt.Sprintf("; its copy %s runs meanwhile for the other requests", copyName(b.Name))
	}
	if !p.waitStopped(ctx, svc.ID) {
		detail += "; some of its tasks are still stopping, and answer until they have"
	}
	return tunnel.Served{TookOver: true, Detail: detail}, nil
}

// park changes spec so the service runs no task, and stores r, with the
// original value of every field it changes, on the service. A spec already
// parked by the same run keeps its first receipt.
func park(s *swarmapi.Service, spec swarmapi.RawSpec, r receipt) error {
	if _, has, _ := receiptOf(s); has {
		return swarmapi.ErrNoUpdate
	}
	parkSpec(s, spec, r)
	return nil
}

// parkSpec changes spec so the service runs no task, and stores r on it
// with the value each changed field has now in r.Saved.
func parkSpec(s *swarmapi.Service, spec swarmapi.RawSpec, r receipt) {
	r.Saved = map[string]json.RawMessage{}
	save := func(path ...string) {
		v, ok := spec.Get(path...)
		if !ok {
			v = json.RawMessage("null")
		}
		r.Saved[strings.Join(path, "/")] = v
	}
	if s.Spec.Mode.Replicated != nil {
		save("Mode")
		spec.Set(json.RawMessage(`{"Replicated":{"Replicas":0}}`), "Mode")
	} else {
		save("TaskTemplate", "Placement")
		var constraints []string
		if pl := s.Spec.TaskTemplate.Placement; pl != nil {
			constraints = slices.Clone(pl.Constraints)
		}
		b, _ := json.Marshal(append(constraints, parkedConstraint))
		spec.Set(b, "TaskTemplate", "Placement", "Constraints")
	}
	spec.SetLabel(labelReceipt, r.label())
}

// startRelay creates the relay service of plan and waits until it runs; a
// relay that cannot run is removed again.
func (p *Platform) startRelay(ctx context.Context, plan relayPlan) (string, error) {
	since := time.Now()
	id, err := p.opts.Client.CreateService(ctx, p.relaySpec(plan))
	if err != nil {
		if swarmapi.IsConflict(err) && plan.Service != plan.Name {
			if relay, _ := p.relayFor(ctx, plan.Name); relay != nil {
				return "", &tunnel.HeldError{Name: plan.Name, Holder: leaseOf(relay).Holder}
			}
			return "", tunnel.Refused(plan.Name, "plug's relay for %s would be the service %s, but a service of that name exists: remove or rename it", plan.Name, plan.Service)
		}
		return "", err
	}
	if err := p.waitTask(ctx, id, "the relay service "+plan.Service, since); err != nil {
		if rerr := p.opts.Client.RemoveService(context.WithoutCancel(ctx), id); rerr != nil && !swarmapi.IsNotFound(rerr) {
			p.opts.Logf("removing the relay %s that did not start: %v", plan.Service, rerr)
		}
		return "", err
	}
	return id, nil
}

// addPort adds b's port to the relay this run already holds for b.Name,
// pointing it (and its lease) at this agent.
func (p *Platform) addPort(ctx context.Context, relay *swarmapi.Service, b tunnel.Binding) (tunnel.Served, error) {
	ports := parsePorts(relay.Spec.Labels[labelPorts])
	ports[portOf(b)] = b.Target
	plan := relayPlan{Name: b.Name, Service: relay.Spec.Name, Parked: relay.Spec.Labels[labelParked], Ports: ports, Lease: p.newLease(b)}
	fresh := p.relaySpec(plan)
	since := time.Now()
	err := p.opts.Client.UpdateService(ctx, relay.ID, func(_ *swarmapi.Service, spec swarmapi.RawSpec) error {
		for k, v := range fresh.Labels {
			spec.SetLabel(k, v)
		}
		args, _ := json.Marshal(fresh.TaskTemplate.ContainerSpec.Args)
		placement, _ := json.Marshal(fresh.TaskTemplate.Placement)
		spec.Set(args, "TaskTemplate", "ContainerSpec", "Args")
		return spec.Set(placement, "TaskTemplate", "Placement")
	})
	if err == nil {
		err = p.waitTask(ctx, relay.ID, "the relay service "+relay.Spec.Name, since)
	}
	if err != nil {
		return tunnel.Served{}, err
	}
	p.addBinding(b, relay.ID, plan.Parked)
	if plan.Parked != "" {
		p.noteDeployed(b.Name, plan.Parked)
		// The run may come back through this agent from another, which
		// woke the service while it was away.
		if err := p.applyAwake(ctx, b.Name, plan.Parked, false); err != nil {
			p.opts.Logf("%s: %v", b.Name, err)
		}
	}
	return tunnel.Served{TookOver: plan.Parked != "", Detail: fmt.Sprintf("%s:%d reaches this session on %s", b.Name, b.Port, p.networkNames())}, nil
}

// answersTo is every name callers reach svc by: the served name, its
// service name and its aliases.
func answersTo(svc *swarmapi.Service, name string) []string {
	names := []string{name, svc.Spec.Name}
	for _, n := range svc.Spec.NetworkAttachments() {
		names = append(names, n.Aliases...)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// attachedNetworks are the IDs of the networks svc is attached to.
func (p *Platform) attachedNetworks(ctx context.Context, svc *swarmapi.Service) []string {
	var ids []string
	for _, n := range svc.Spec.NetworkAttachments() {
		id := n.Target
		if nw, err := p.opts.Client.Network(ctx, n.Target); err == nil {
			id = nw.ID
		}
		ids = append(ids, id)
	}
	return ids
}

// networkNames lists the agent's networks for the developer's terminal.
func (p *Platform) networkNames() string {
	names := make([]string, len(p.opts.Networks))
	for i, n := range p.opts.Networks {
		names[i] = n.Name
	}
	return strings.Join(names, ", ")
}

// modeText says how many tasks svc runs, "2 replicas" or "global".
func modeText(svc *swarmapi.Service) string {
	if r := svc.Spec.Mode.Replicated; r != nil && r.Replicas != nil {
		return fmt.Sprintf("%d replicas", *r.Replicas)
	}
	return "global"
}
