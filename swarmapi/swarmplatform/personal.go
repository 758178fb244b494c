package swarmplatform

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"plug/swarmapi"
	"plug/tunnel"
)

// Personal takeovers (plug -s ... --header/--path, tunnel.Binding.Filter):
// the agent's front routes each request to the run whose filter it
// matches, and every other one to the deployed service's tasks. A parked
// service runs none, and its tasks cannot keep running beside the relay
// without answering the name themselves (Docker's DNS names a service's
// tasks under its name on every network it is on). So such a takeover
// first runs a copy of the service: its spec, under the name
// plug-deployed-NAME, with none of its aliases, no published port, in
// dnsrr mode, on its networks and the agent's first; then parks the
// service as a full takeover does. The copy's tasks answer the requests
// of no filter (DeployedAddrs) until the name is given back, when it is
// removed with the relay. It carries the run's lease (leased.go) and the
// label plug.dev/deployed-copy, whose value is the served name.

var _ tunnel.DeployedLister = (*Platform)(nil)

// labelCopy marks the copy of a service taken over personally; its value
// is the served name.
const labelCopy = "plug.dev/deployed-copy"

// copyName is the copy's service name for the served name.
func copyName(name string) string { return plugName("plug-deployed-", name) }

// DeployedAddrs lists the running tasks of the service b.Name was taken
// over from — the copy of it, for a personal takeover — on b.Port; see
// tunnel.DeployedLister.
func (p *Platform) DeployedAddrs(b tunnel.Binding) ([]string, error) {
	p.mu.Lock()
	d := p.takenFrom[b.Name]
	p.mu.Unlock()
	if d == nil {
		return nil, fmt.Errorf("%s is a name this run added: no deployed service answers it", b.Name)
	}
	ips, err := d.current(context.Background(), p)
	if err != nil {
		return nil, err
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("the deployed service %s runs no task", b.Name)
	}
	return targetsOf(ips, b.Port), nil
}

// targetsOf are ips, each on port.
func targetsOf(ips []netip.Addr, port int) []string {
	targets := make([]string, len(ips))
	for i, ip := range ips {
		targets[i] = netip.AddrPortFrom(ip, uint16(port)).String()
	}
	return targets
}

// startCopy runs the copy of svc for b's personal takeover, and returns
// its ID once a task of it runs; a copy that cannot run is removed again.
func (p *Platform) startCopy(ctx context.Context, svc *swarmapi.Service, b tunnel.Binding) (string, error) {
	spec, err := p.copySpec(svc, b)
	if err != nil {
		return "", err
	}
	name := copyName(b.Name)
	p.holdLeased(name, true) // held before it exists: a sweep meanwhile leaves it alone
	since := time.Now()
	id, err := p.opts.Client.CreateService(ctx, spec)
	if swarmapi.IsConflict(err) {
		err = tunnel.Refused(b.Name, "a personal takeover of %s runs a copy of it named %s, but a service of that name exists: remove or rename it", b.Name, name)
	}
	if err != nil {
		p.holdLeased(name, false)
		return "", err
	}
	if err := p.waitTask(ctx, id, "the copy "+name+" of service "+svc.Spec.Name, since); err != nil {
		p.removeCopy(context.WithoutCancel(ctx), b.Name)
		return "", err
	}
	p.opts.Logf("%s: personal takeover by %s (%s): service %s runs as %s for the other requests", b.Name, b.Holder, tunnel.PeerText(b.Filter), svc.Spec.Name, name)
	return id, nil
}

// copySpec is the spec of the copy of svc for b: its own, renamed, its
// service labels replaced by the lease's, without aliases or published
// ports, attached to the agent's first network too.
func (p *Platform) copySpec(svc *swarmapi.Service, b tunnel.Binding) (swarmapi.RawSpec, error) {
	spec, err := svc.RawSpec()
	if err != nil {
		return nil, err
	}
	labels := p.newLease(b).labels()
	labels[labelCopy] = b.Name
	var nets []swarmapi.NetworkAttachmentConfig
	for _, n := range svc.Spec.NetworkAttachments() {
		nets = append(nets, swarmapi.NetworkAttachmentConfig{Target: n.Target})
	}
	agentNet := p.opts.Networks[0]
	if !slices.ContainsFunc(nets, func(n swarmapi.NetworkAttachmentConfig) bool {
		return n.Target == agentNet.ID || n.Target == agentNet.Name
	}) {
		nets = append(nets, swarmapi.NetworkAttachmentConfig{Target: agentNet.ID})
	}
	for _, set := range []struct {
		value any
		path  []string
	}{
		{copyName(b.Name), []string{"Name"}},
		{labels, []string{"Labels"}},
		{nets, []string{"TaskTemplate", "Networks"}},
		{swarmapi.EndpointSpec{Mode: "dnsrr"}, []string{"EndpointSpec"}},
	} {
		raw, _ := json.Marshal(set.value)
		if err := spec.Set(raw, set.path...); err != nil {
			return nil, err
		}
	}
	spec.Delete("Networks") // where old clients kept TaskTemplate.Networks
	return spec, nil
}

// removeCopy removes the copy made for a personal takeover of name, if
// there is one.
func (p *Platform) removeCopy(ctx context.Context, name string) error {
	cp := copyName(name)
	svc, err := p.opts.Client.Service(ctx, cp)
	switch {
	case swarmapi.IsNotFound(err):
		p.holdLeased(cp, false)
		return nil
	case err != nil:
		return err
	case svc.Spec.Labels[labelCopy] != name:
		return nil // not plug's
	}
	if err := p.opts.Client.RemoveService(ctx, svc.ID); err != nil && !swarmapi.IsNotFound(err) {
		return fmt.Errorf("removing the copy %s of the service taken over personally: %w", cp, err)
	}
	p.holdLeased(cp, false)
	p.opts.Logf("%s: removed its copy %s", name, cp)
	return nil
}
