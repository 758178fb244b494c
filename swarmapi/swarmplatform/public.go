package swarmplatform

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"plug/swarmapi"
	"plug/tunnel"
)

var _ tunnel.PublicAddresser = (*Platform)(nil)

// PublicAddr is the address developers reach the agent by, as the swarm
// publishes it (tunnel.PublicAddresser): the port the agent's service
// publishes for port, the agent's own, on the address the agent's node
// advertises to the swarm. What it assumes, and how says so: that
// developers reach that node's address. In host mode the port answers on
// the agent's node only, which is the node whose address it gives; in
// ingress mode it answers on every node. Behind a load balancer, NAT or a
// DNS name the operator gives the address instead (PLUG_PUBLIC_ADDR).
func (p *Platform) PublicAddr(ctx context.Context, port int) (addr, how string, err error) {
	if p.opts.Service == "" {
		return "", "", errors.New("the agent does not run as a swarm service, so the swarm publishes no port for it")
	}
	svc, err := p.opts.Client.Service(ctx, p.opts.Service)
	if err != nil {
		return "", "", fmt.Errorf("reading the agent's service: %w", err)
	}
	published, ok := publishedPort(svc.Endpoint.Ports, port)
	if !ok {
		return "", "", fmt.Errorf("service %s publishes no port for the agent's port %d (ports: in deploy/plug-swarm.yml)", svc.Spec.Name, port)
	}
	info, err := p.opts.Client.Info(ctx)
	if err != nil {
		return "", "", fmt.Errorf("reading the agent's node: %w", err)
	}
	node, err := netip.ParseAddr(info.Swarm.NodeAddr)
	if err != nil || node.IsUnspecified() {
		return "", "", fmt.Errorf("the agent's node advertises no address to the swarm (%q)", info.Swarm.NodeAddr)
	}
	mode := published.PublishMode
	if mode == "" {
		mode = "ingress"
	}
	how = fmt.Sprintf("service %s publishes port %d in %s mode, and this agent's node advertises %s to the swarm", svc.Spec.Name, published.PublishedPort, mode, node)
	return net.JoinHostPort(node.String(), strconv.Itoa(int(published.PublishedPort))), how, nil
}

// publishedPort is the TCP port of ports published for target.
func publishedPort(ports []swarmapi.PortConfig, target int) (swarmapi.PortConfig, bool) {
	for _, pc := range ports {
		if int(pc.TargetPort) == target && pc.PublishedPort != 0 && (pc.Protocol == "" || pc.Protocol == "tcp") {
			return pc, true
		}
	}
	return swarmapi.PortConfig{}, false
}
