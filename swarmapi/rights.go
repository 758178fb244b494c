package swarmapi

import (
	"context"
	"fmt"

	"plug/tunnel"
)

// Rights reports what the agent needs of the engine: the socket, an API
// version both speak, a manager to change services, and an overlay
// network to put names on. Each is required: without the socket nothing
// works, and without the others -s fails on its first use.
func (p *Platform) Rights(ctx context.Context) ([]tunnel.Right, error) {
	socket := tunnel.Right{
		Rule:     "use the Docker socket " + p.cfg.Client.Socket(),
		Feature:  "everything: the agent reads and changes the swarm through the engine",
		Required: true,
		Fix:      "mount the engine's socket into the agent (deploy/plug-swarm.yml does) and run it in the socket's group",
	}
	version := tunnel.Right{
		Rule:     fmt.Sprintf("Docker Engine API %s to %s", MinAPIVersion, MaxAPIVersion),
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
		Granted:  p.cfg.Address != "" && len(p.cfg.Networks) > 0,
		Fix:      "attach the agent to the application's network: docker service update --network-add NETWORK plug_agent, or list it under networks in deploy/plug-swarm.yml",
	}
	if network.Granted {
		network.Rule += " (" + p.networkNames() + ")"
	}

	_, err := p.cfg.Client.APIVersion(ctx)
	if err != nil {
		if _, ok := err.(*VersionError); ok {
			socket.Granted = true
			version.Fix = err.Error()
		} else {
			socket.Fix = err.Error()
		}
		return []tunnel.Right{socket, version, manager, network}, nil
	}
	socket.Granted, version.Granted = true, true
	info, err := p.cfg.Client.Info(ctx)
	if err != nil {
		return nil, err
	}
	manager.Granted = info.Swarm.ControlAvailable
	if !manager.Granted && info.Swarm.LocalNodeState != "active" {
		manager.Fix = fmt.Sprintf("this engine is in no swarm (state %q): run `docker swarm init`, or deploy the agent to a swarm", info.Swarm.LocalNodeState)
	}
	return []tunnel.Right{socket, version, manager, network}, nil
}
