package swarmplatform

import (
	"context"
	"slices"
	"strings"

	"plug/swarmapi"
	"plug/tunnel"
)

// checkBinding is tunnel.CheckBinding, with a hint for the names of stack
// services, which Swarm spells STACK_SERVICE.
func checkBinding(b tunnel.Binding) error {
	err := tunnel.CheckBinding(b)
	if err != nil && strings.Contains(b.Name, "_") {
		return tunnel.Refused(b.Name, "%v (a stack's service web_api is reached as its alias api)", err)
	}
	return err
}

// deployed returns the service callers reach as name: the service of that
// name, else the one service with that network alias (a stack's service
// web_api answers to api on the stack's network). nil when there is none.
func (p *Platform) deployed(ctx context.Context, name string) (*swarmapi.Service, error) {
	all, err := p.opts.Client.Services(ctx, nil)
	if err != nil {
		return nil, err
	}
	var byAlias []*swarmapi.Service
	for i := range all {
		s := &all[i]
		if s.Spec.Name == name {
			return s, nil
		}
		for _, n := range s.Spec.NetworkAttachments() {
			if slices.Contains(n.Aliases, name) {
				byAlias = append(byAlias, s)
				break
			}
		}
	}
	switch len(byAlias) {
	case 0:
		return nil, nil
	case 1:
		return byAlias[0], nil
	}
	names := make([]string, len(byAlias))
	for i, s := range byAlias {
		names[i] = s.Spec.Name
	}
	return nil, tunnel.Refused(name, "%s is a network alias of several services (%s): plug cannot tell which to take over; serve one of them by its service name", name, strings.Join(names, ", "))
}

// takeable refuses to take over what must not be: the agent itself, a
// relay, a volume helper, a copy of a service, a service the operator protects (label plug.dev/protect=true), a
// job, a service parked by another live run. A receipt left by a run that
// is gone is restored first.
func (p *Platform) takeable(ctx context.Context, svc *swarmapi.Service, b tunnel.Binding) error {
	if p.opts.Service != "" && svc.ID == p.opts.Service {
		return tunnel.Refused(b.Name, "%s is plug's own agent service: serving it would send the developers who install plug or connect to it to this run; choose another name", b.Name)
	}
	if svc.Spec.Labels[labelProtect] == "true" {
		return tunnel.Refused(b.Name, "%s is protected by the operator (label %s=true on the service %s), so plug never serves it; choose another name", b.Name, labelProtect, svc.Spec.Name)
	}
	if served := svc.Spec.Labels[labelRelay]; served != "" {
		return tunnel.Refused(b.Name, "%s is the relay plug runs for the served name %s; choose another name", svc.Spec.Name, served)
	}
	if served := svc.Spec.Labels[labelCopy]; served != "" {
		return tunnel.Refused(b.Name, "%s is the copy plug runs of %s while it is taken over personally; choose another name", svc.Spec.Name, served)
	}
	if svc.Spec.Labels[labelVolume] != "" {
		return tunnel.Refused(b.Name, "%s is the volume helper plug runs for a run's --volume; choose another name", svc.Spec.Name)
	}
	if svc.Spec.Mode.Replicated == nil && svc.Spec.Mode.Global == nil {
		return tunnel.Refused(b.Name, "%s is a job, not a service that answers calls; plug serves names of replicated and global services", svc.Spec.Name)
	}
	r, has, err := receiptOf(svc)
	if err != nil || !has || r.Holder.SameRun(b.Holder) {
		return err
	}
	if ok, _ := p.alive(ctx, r.Task, r.Parked); ok {
		return &tunnel.HeldError{Name: b.Name, Holder: r.Holder}
	}
	_, err = p.restore(ctx, svc.ID, r.Relay)
	return err
}
