package swarmplatform

import (
	"context"
	"fmt"
	"strings"

	"plug/swarmapi"
	"plug/tunnel"
)

// The environment of a swarm service (plug --env-from service/NAME): the
// one its running container has, as the engine describes that container
// (its image's ENV with the service's Env over it, templates expanded),
// when a task of it runs on the agent's node; else the service's Env over
// its image's ENV, read from the engine.

var _ tunnel.EnvResolver = (*Platform)(nil)

// Env reads a service's environment; see tunnel.EnvResolver.
func (p *Platform) Env(ctx context.Context, req tunnel.EnvRequest) (*tunnel.Env, error) {
	if err := tunnel.CheckEnvRequest(req); err != nil {
		return nil, err
	}
	if req.Kind != tunnel.WorkloadService {
		return nil, fmt.Errorf("on Docker Swarm, name a service: --env-from service/%s (docker service ls lists them)", req.Name)
	}
	if req.Container != "" {
		return nil, fmt.Errorf("a swarm service has one container: leave out :%s", req.Container)
	}
	svc, err := p.deployed(ctx, req.Name)
	if err != nil {
		return nil, err
	}
	if svc == nil {
		return nil, fmt.Errorf("service/%s does not exist in this swarm (docker service ls lists the services)", req.Name)
	}
	what := "service/" + svc.Spec.Name
	if svc.Spec.Labels[labelVolume] != "" {
		return nil, fmt.Errorf("%s is a volume helper of plug's: its environment holds the credential of its run's share alone", what)
	}
	if ctr := p.runningContainer(ctx, svc); ctr != nil {
		return envOf(fmt.Sprintf("%s: container %s", what, strings.TrimPrefix(ctr.Name, "/")), ctr.Config.Env), nil
	}
	spec := svc.Spec.TaskTemplate.ContainerSpec
	if spec == nil {
		return nil, fmt.Errorf("%s runs no container", what)
	}
	var vars, notes []string
	img, err := p.opts.Client.Image(ctx, spec.Image)
	switch {
	case swarmapi.IsNotFound(err):
		notes = append(notes, fmt.Sprintf("the image's own ENV is not included: no task of %s runs on the agent's node, and its image %s is not there", what, spec.Image))
	case err != nil:
		return nil, err
	default:
		vars = img.Config.Env
	}
	for _, kv := range spec.Env {
		if strings.Contains(kv, "{{") {
			notes = append(notes, fmt.Sprintf("no task of %s runs on the agent's node: values with templates ({{...}}) are as its service spec writes them", what))
			break
		}
	}
	env := envOf(what+": its service spec and image (no task of it runs on the agent's node)", append(vars, spec.Env...))
	env.Notes = notes
	return env, nil
}

// runningContainer is the container of a running task of svc on this
// engine's node, or nil.
func (p *Platform) runningContainer(ctx context.Context, svc *swarmapi.Service) *swarmapi.Container {
	tasks, err := p.opts.Client.Tasks(ctx, map[string][]string{"service": {svc.ID}, "desired-state": {"running"}})
	if err != nil {
		return nil
	}
	for _, t := range tasks {
		if !t.Running() || t.Status.ContainerStatus == nil || t.Status.ContainerStatus.ContainerID == "" {
			continue
		}
		if ctr, err := p.opts.Client.Container(ctx, t.Status.ContainerStatus.ContainerID); err == nil && ctr.State.Running {
			return ctr
		}
	}
	return nil
}

// envOf is the environment of NAME=VALUE entries, a later one replacing
// an earlier of the same name, as the engine merges them. An entry with no
// '=' sets nothing.
func envOf(workload string, entries []string) *tunnel.Env {
	byName := map[string]string{}
	for _, kv := range entries {
		if name, value, ok := strings.Cut(kv, "="); ok && name != "" {
			byName[name] = value
		}
	}
	e := &tunnel.Env{Workload: workload}
	for k, v := range byName {
		e.Vars = append(e.Vars, tunnel.EnvVar{Name: k, Value: v})
	}
	return e
}
