package swarmplatform

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"plug/swarmapi"
	"plug/tunnel"
)

// Rights reports what the agent needs of the engine: the socket, an API
// version both speak, a manager to change services, and an overlay
// network to put names on. Each is required: without the socket nothing
// works, and without the others -s fails on its first use.
func (p *Platform) Rights(ctx context.Context) ([]tunnel.Right, error) {
	socket := tunnel.Right{
		Rule:     "use the Docker socket " + p.opts.Client.Socket(),
		Feature:  "everything: the agent reads and changes the swarm through the engine",
		Required: true,
		Fix:      "mount the engine's socket into the agent and run it in the socket's group (DOCKER_GID, deploy/plug-swarm.yml)",
	}
	version := tunnel.Right{
		Rule:     fmt.Sprintf("Docker Engine API %s to %s", swarmapi.MinAPIVersion, swarmapi.MaxAPIVersion),
		Feature:  "everything: the agent speaks the engine's API",
		Required: true,
		Fix:      "run Docker 20.10 or newer on the managers",
	}
	manager := tunnel.Right{
		Rule:     "run on a swarm manager",
		Feature:  "-s: create relay services, park and restore deployed services",
		Required: true,
		Fix:      "place the agent on a manager: deploy.placement.constraints [node.role == manager] (deploy/plug-swarm.yml)",
	}
	network := tunnel.Right{
		Rule:     "attached to the application's overlay network",
		Feature:  "-s and -c: put names on the network and reach its services",
		Required: true,
		Granted:  p.opts.Address != "" && len(p.opts.Networks) > 0,
		Fix:      "deploy with PLUG_NETWORK set to the application's network (deploy/plug-swarm.yml), or docker service update --network-add NETWORK plug_agent",
	}
	rights := []tunnel.Right{socket, version, manager, network}

	engine, err := p.opts.Client.Engine(ctx)
	var ve *swarmapi.VersionError
	switch {
	case errors.As(err, &ve):
		rights[0].Granted = true
		rights[1].Fix = err.Error()
		return rights, nil
	case err != nil:
		rights[0].Fix = err.Error()
		return rights, nil
	}
	rights[0].Granted, rights[1].Granted = true, true
	rights[1].Rule += fmt.Sprintf(" (Docker %s speaks %s)", engine.Version, engine.APIVersion)
	info, err := p.opts.Client.Info(ctx)
	if err != nil {
		return nil, err
	}
	rights[2].Granted = info.Swarm.ControlAvailable
	if info.Swarm.LocalNodeState != "active" {
		rights[2].Fix = fmt.Sprintf("this engine is in no swarm (state %q): deploy the agent to a swarm (docker swarm init makes one)", info.Swarm.LocalNodeState)
	}
	if network.Granted {
		rights[3].Rule += " (" + p.networkNames() + ")"
	} else if names := p.overlayNetworks(ctx); names != "" {
		rights[3].Fix += "; this swarm's overlay networks: " + names
	}
	return rights, nil
}

// overlayNetworks lists the swarm's overlay networks but ingress, for the
// developer to choose from; "" when there are none or they cannot be read.
func (p *Platform) overlayNetworks(ctx context.Context) string {
	nets, err := p.opts.Client.Networks(ctx, map[string][]string{"driver": {"overlay"}})
	if err != nil {
		return ""
	}
	var names []string
	for _, n := range nets {
		if !n.Ingress {
			names = append(names, n.Name)
		}
	}
	return strings.Join(names, ", ")
}
