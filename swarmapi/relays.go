package swarmapi

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"time"

	"plug/swarmapi/relay"
)

// relayPlan is what a relay service is made from.
type relayPlan struct {
	Name     string      // the served name
	Service  string      // the relay service's own name
	Parked   string      // ID of the service parked for it, if any
	Aliases  []string    // the names it takes on each of its networks
	Networks []string    // IDs of networks to join beyond the agent's
	Ports    map[int]int // cluster port → the agent's target port
	Lease    lease
}

// relaySpec is the spec of the relay service for plan: one task of the
// agent's image running `plug relay`, on the agent's node, on the agent's
// networks (and plan's), answering to the served name by DNS round robin,
// which needs no IPVS.
func (p *Platform) relaySpec(plan relayPlan) ServiceSpec {
	labels := plan.Lease.labels()
	labels[labelRelay] = plan.Name
	labels[labelPorts] = formatPorts(plan.Ports)
	if plan.Parked != "" {
		labels[labelParked] = plan.Parked
	}
	one := uint64(1)
	spec := ServiceSpec{
		Name:   plan.Service,
		Labels: labels,
		TaskTemplate: TaskSpec{
			ContainerSpec: &ContainerSpec{
				Image: p.cfg.Image,
				Args:  p.relayArgs(plan.Ports),
				// Callers may use any port; the relay runs as the image's
				// unprivileged user.
				Sysctls: map[string]string{"net.ipv4.ip_unprivileged_port_start": "0"},
			},
			RestartPolicy: &RestartPolicy{Condition: "any", Delay: int64(time.Second)},
			Networks:      p.relayNetworks(plan),
		},
		Mode:         ServiceMode{Replicated: &ReplicatedService{Replicas: &one}},
		EndpointSpec: &EndpointSpec{Mode: "dnsrr"},
	}
	if p.cfg.Node != "" {
		spec.TaskTemplate.Placement = &Placement{Constraints: []string{"node.id==" + p.cfg.Node}}
	}
	return spec
}

// relayArgs is the relay's command line: each cluster port to the agent's
// target port, at the agent's address.
func (p *Platform) relayArgs(ports map[int]int) []string {
	var routes []relay.Route
	for _, port := range slices.Sorted(maps.Keys(ports)) {
		routes = append(routes, relay.Route{
			Listen: ":" + strconv.Itoa(port),
			To:     net.JoinHostPort(p.cfg.Address, strconv.Itoa(ports[port])),
		})
	}
	return relay.Args(routes)
}

// relayNetworks attaches the relay to the agent's networks and plan's, with
// plan's aliases on each.
func (p *Platform) relayNetworks(plan relayPlan) []NetworkAttachmentConfig {
	var ids []string
	for _, n := range p.cfg.Networks {
		ids = append(ids, n.ID)
	}
	for _, id := range plan.Networks {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	out := make([]NetworkAttachmentConfig, len(ids))
	for i, id := range ids {
		out[i] = NetworkAttachmentConfig{Target: id, Aliases: plan.Aliases}
	}
	return out
}

// waitRelay waits until the relay service id has a running task. A task
// the swarm refuses or that fails ends the wait with its error.
func (p *Platform) waitRelay(ctx context.Context, id, name string) error {
	since := time.Now()
	return poll(ctx, startTimeout, func() (bool, error) {
		tasks, err := p.cfg.Client.Tasks(ctx, map[string][]string{"service": {id}})
		if err != nil {
			return false, err
		}
		for _, t := range tasks {
			if t.Running() {
				return true, nil
			}
			if (t.Status.State == "failed" || t.Status.State == "rejected") && t.Status.Timestamp.After(since) {
				return false, fmt.Errorf("the relay service %s cannot run: %s %s (image %s)", name, t.Status.Message, t.Status.Err, p.cfg.Image)
			}
		}
		return false, nil
	})
}

// waitStopped waits until the service id has no running task; it reports
// whether that happened before the time limit.
func (p *Platform) waitStopped(ctx context.Context, id string) bool {
	err := poll(ctx, startTimeout, func() (bool, error) {
		tasks, err := p.cfg.Client.Tasks(ctx, map[string][]string{"service": {id}})
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
