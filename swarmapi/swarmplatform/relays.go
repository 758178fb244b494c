package swarmplatform

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"plug/swarmapi"
	"plug/swarmapi/swarmplatform/relay"
)

// takeoverRelayName is the relay service's name when the served name
// belongs to a deployed service: "plug-NAME".
func takeoverRelayName(name string) string { return plugName("plug-", name) }

// plugName is prefix+name, shortened with a hash when that exceeds the 63
// characters a service name may have.
func plugName(prefix, name string) string {
	n := prefix + name
	if len(n) <= 63 {
		return n
	}
	sum := sha256.Sum256([]byte(name))
	return n[:54] + "-" + hex.EncodeToString(sum[:4])
}

// relayFor returns plug's relay serving name, or nil.
func (p *Platform) relayFor(ctx context.Context, name string) (*swarmapi.Service, error) {
	relays, err := p.opts.Client.Services(ctx, map[string][]string{"label": {labelRelay + "=" + name}})
	if err != nil || len(relays) == 0 {
		return nil, err
	}
	return &relays[0], nil
}

// relayPlan is what a relay service is made from.
type relayPlan struct {
	Name     string            // the served name
	Service  string            // the relay service's own name
	Parked   string            // ID of the service parked for it, if any
	Aliases  []string          // the names it takes on each of its networks
	Networks []string          // IDs of networks to join beyond the agent's
	Ports    map[relayPort]int // cluster port → the agent's target port
	Lease    lease
}

// relaySpec is the spec of the relay service for plan: one task of the
// agent's image running `plug relay`, on the agent's node, on the agent's
// networks (and plan's), answering to the served name by DNS round robin,
// which needs no IPVS. A change of it (a run moved to another agent,
// another port) starts the new task before the old one stops.
func (p *Platform) relaySpec(plan relayPlan) swarmapi.ServiceSpec {
	labels := plan.Lease.labels()
	labels[labelRelay] = plan.Name
	labels[labelPorts] = formatPorts(plan.Ports)
	if plan.Parked != "" {
		labels[labelParked] = plan.Parked
	}
	one := uint64(1)
	spec := swarmapi.ServiceSpec{
		Name:   plan.Service,
		Labels: labels,
		TaskTemplate: swarmapi.TaskSpec{
			ContainerSpec: &swarmapi.ContainerSpec{
				Image: p.opts.Image,
				Args:  p.relayArgs(plan.Ports),
				// Callers may use any port; the relay runs as the image's
				// unprivileged user.
				Sysctls: map[string]string{"net.ipv4.ip_unprivileged_port_start": "0"},
			},
			RestartPolicy: &swarmapi.RestartPolicy{Condition: "any", Delay: int64(time.Second)},
			Networks:      p.relayNetworks(plan),
		},
		Mode:         swarmapi.ServiceMode{Replicated: &swarmapi.ReplicatedService{Replicas: &one}},
		EndpointSpec: &swarmapi.EndpointSpec{Mode: "dnsrr"},
		UpdateConfig: &swarmapi.UpdateConfig{Order: "start-first"},
	}
	if p.opts.Node != "" {
		spec.TaskTemplate.Placement = &swarmapi.Placement{Constraints: []string{"node.id==" + p.opts.Node}}
	}
	return spec
}

// relayArgs is the relay's command line: each cluster port to the agent's
// target port, at the agent's address, a UDP one to the agent's UDP port.
func (p *Platform) relayArgs(ports map[relayPort]int) []string {
	var routes []relay.Route
	for _, port := range sortedPorts(ports) {
		routes = append(routes, relay.Route{
			Listen: ":" + strconv.Itoa(port.Port),
			To:     net.JoinHostPort(p.opts.Address, strconv.Itoa(ports[port])),
			UDP:    port.UDP,
		})
	}
	return relay.Args(routes)
}

// relayNetworks attaches the relay to the agent's networks and plan's, with
// plan's aliases on each.
func (p *Platform) relayNetworks(plan relayPlan) []swarmapi.NetworkAttachmentConfig {
	var ids []string
	for _, n := range p.opts.Networks {
		ids = append(ids, n.ID)
	}
	for _, id := range plan.Networks {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	out := make([]swarmapi.NetworkAttachmentConfig, len(ids))
	for i, id := range ids {
		out[i] = swarmapi.NetworkAttachmentConfig{Target: id, Aliases: plan.Aliases}
	}
	return out
}

// waitTask waits until the service id (what, for messages: "the relay
// service web") has a running task. A task the swarm refuses or that fails
// after since (when the service was created or changed) ends the wait
// with its error.
func (p *Platform) waitTask(ctx context.Context, id, what string, since time.Time) error {
	return poll(ctx, p.opts.StartTimeout, func() (bool, error) {
		tasks, err := p.opts.Client.Tasks(ctx, map[string][]string{"service": {id}})
		if err != nil {
			return false, err
		}
		for _, t := range tasks {
			if t.Running() {
				return true, nil
			}
			if (t.Status.State == "failed" || t.Status.State == "rejected") && t.Status.Timestamp.After(since) {
				return false, fmt.Errorf("%s cannot run: %s %s (image %s)", what, t.Status.Message, t.Status.Err, p.opts.Image)
			}
		}
		return false, nil
	})
}

// handBackWait bounds how long a give-back waits for the restored
// service to run a task before its relay goes.
const handBackWait = 20 * time.Second

// waitRunning waits until the service id runs a task, or wants none (a
// replicated service of zero replicas), for at most handBackWait.
func (p *Platform) waitRunning(ctx context.Context, id string) error {
	return poll(ctx, handBackWait, func() (bool, error) {
		svc, err := p.opts.Client.Service(ctx, id)
		if err != nil {
			return false, err
		}
		if r := svc.Spec.Mode.Replicated; r != nil && r.Replicas != nil && *r.Replicas == 0 {
			return true, nil
		}
		tasks, err := p.opts.Client.Tasks(ctx, map[string][]string{"service": {id}, "desired-state": {"running"}})
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(tasks, func(t swarmapi.Task) bool { return t.Running() }), nil
	})
}

// waitStopped waits until the service id has no running task; it reports
// whether that happened before the time limit.
func (p *Platform) waitStopped(ctx context.Context, id string) bool {
	err := poll(ctx, p.opts.StartTimeout, func() (bool, error) {
		tasks, err := p.opts.Client.Tasks(ctx, map[string][]string{"service": {id}})
		if err != nil {
			return false, err
		}
		for _, t := range tasks {
			if t.Status.State == "running" {
				return false, nil
			}
		}
		return true, nil
	})
	return err == nil
}

// poll calls check every quarter second until it reports done, fails, or
// the limit or ctx ends.
func poll(ctx context.Context, limit time.Duration, check func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		done, err := check()
		if done || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("still waiting after %s: %w", limit, ctx.Err())
		case <-tick.C:
		}
	}
}
