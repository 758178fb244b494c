package swarmapi

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
)

// taskLabel is the label the swarm puts on a task's container.
const taskLabel = "com.docker.swarm.task.id"

// NewPlatformFromEnv returns the platform of an agent running as a swarm
// task with the engine's socket mounted (deploy/plug-swarm.yml). It talks
// to DOCKER_HOST or /var/run/docker.sock, finds its own task from
// PLUG_SWARM_TASK (the stack file sets it to {{.Task.ID}}) or, failing
// that, from its container (its host name), and takes from the task its
// networks, address, node and image.
func NewPlatformFromEnv(ctx context.Context, logf func(format string, args ...any)) (*Platform, error) {
	c, err := NewClientFromEnv()
	if err != nil {
		return nil, err
	}
	taskID := os.Getenv("PLUG_SWARM_TASK")
	if taskID == "" {
		if taskID, err = ownTaskFromContainer(ctx, c); err != nil {
			return nil, err
		}
	}
	cfg, err := agentConfig(ctx, c, taskID)
	if err != nil {
		return nil, err
	}
	cfg.Logf = logf
	return NewPlatform(cfg), nil
}

// ownTaskFromContainer finds the task of the container plug runs in: the
// swarm names a task's container's host name after the container's ID.
func ownTaskFromContainer(ctx context.Context, c *Client) (string, error) {
	host, err := os.Hostname()
	if err != nil {
		return "", err
	}
	ctr, err := c.Container(ctx, host)
	if IsNotFound(err) {
		return "", fmt.Errorf("plug agent on Swarm runs as a swarm service (deploy/plug-swarm.yml), but no container is named %s here: set PLUG_SWARM_TASK={{.Task.ID}} in the service's environment", host)
	}
	if err != nil {
		return "", err
	}
	id := ctr.Config.Labels[taskLabel]
	if id == "" {
		return "", fmt.Errorf("container %s is not a swarm task: plug agent on Swarm runs as a swarm service (docker stack deploy -c plug-swarm.yml plug)", host)
	}
	return id, nil
}

// agentConfig describes the agent running as task taskID.
func agentConfig(ctx context.Context, c *Client, taskID string) (Config, error) {
	t, err := c.Task(ctx, taskID)
	if IsNotFound(err) {
		return Config{}, fmt.Errorf("PLUG_SWARM_TASK=%s names no task: the stack file sets it to {{.Task.ID}}", taskID)
	}
	if err != nil {
		return Config{}, err
	}
	cfg := Config{Client: c, Task: t.ID, Service: t.ServiceID, Node: t.NodeID}
	if t.Spec.ContainerSpec != nil {
		cfg.Image = t.Spec.ContainerSpec.Image
	}
	if cfg.Image == "" {
		return Config{}, errors.New("the agent's task names no image to run relays with")
	}
	for _, a := range t.NetworksAttachments {
		if a.Network.Spec.Ingress || len(a.Addresses) == 0 {
			continue
		}
		if cfg.Address == "" {
			prefix, err := netip.ParsePrefix(a.Addresses[0])
			if err != nil {
				return Config{}, fmt.Errorf("the agent's address on %s: %w", a.Network.Spec.Name, err)
			}
			cfg.Address = prefix.Addr().String()
		}
		cfg.Networks = append(cfg.Networks, NetworkRef{ID: a.Network.ID, Name: a.Network.Spec.Name})
	}
	return cfg, nil
}
