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

// plug update --agent on Swarm: the agent sets the image of its own
// service and follows the update by listing the service's tasks four
// times a second. The update starts the new task before this one stops (order
// start-first, for this update only: the service's own update_config is
// put back when it ends), so that this agent sees the new task run, or
// fail, and undoes a failed update by setting the previous image back. A
// service that publishes a port in host mode cannot run a second task
// beside this one on the node: it is refused, saying how to update it by
// hand. The label labelAgentUpdate says who moved it from which image to
// which, when, and how it ended.

// labelAgentUpdate, on the agent's service, is the last plug update
// --agent (JSON), for docker service inspect.
const labelAgentUpdate = "plug.dev/agent-update"

// agentSettle is how long the new task runs before the update counts as
// done: a task that ends at once (a crash at start) fails it.
const agentSettle = 3 * time.Second

var _ tunnel.AgentUpdater = (*Platform)(nil)

// UpdateAgent moves the agent's service to req.Image and follows the
// update (tunnel.AgentUpdater).
func (p *Platform) UpdateAgent(ctx context.Context, req tunnel.AgentUpdateRequest, progress func(string)) (tunnel.AgentRollout, error) {
	if p.opts.Service == "" {
		return tunnel.AgentRollout{}, fmt.Errorf("the agent runs in no service it knows of (its task was not found at boot): move its image the way it was deployed")
	}
	svc, err := p.opts.Client.Service(ctx, p.opts.Service)
	if err != nil {
		return tunnel.AgentRollout{}, fmt.Errorf("the agent could not read its own service: %w", err)
	}
	if svc.Spec.TaskTemplate.ContainerSpec == nil {
		return tunnel.AgentRollout{}, fmt.Errorf("service %s runs no container: move its image the way it was deployed", svc.Spec.Name)
	}
	r := tunnel.AgentRollout{Workload: "service/" + svc.Spec.Name, From: svc.Spec.TaskTemplate.ContainerSpec.Image, To: req.Image}
	switch {
	case svc.Spec.TaskTemplate.ContainerSpec.Hostname != "":
		return r, fmt.Errorf("%s gives its containers the hostname %s, by which plug could not tell the new agent when it answers; move it by hand: docker service update --image %s --update-failure-action rollback %s", r.Workload, svc.Spec.TaskTemplate.ContainerSpec.Hostname, req.Image, svc.Spec.Name)
	case imageName(r.From) == imageName(req.Image):
		return r, fmt.Errorf("%s runs image %s already", r.Workload, req.Image)
	case svc.Spec.EndpointSpec != nil && slices.ContainsFunc(svc.Spec.EndpointSpec.Ports, func(pc swarmapi.PortConfig) bool { return pc.PublishMode == "host" }):
		return r, fmt.Errorf("%s publishes its port in host mode, so its next task cannot start on this node beside this agent, which, stopped first, could neither follow the update nor undo one that fails; move it by hand: docker service update --image %s --update-failure-action rollback %s", r.Workload, req.Image, svc.Spec.Name)
	}
	note := map[string]any{"from": r.From, "to": req.Image, "by": req.By, "at": time.Now().UTC().Format(time.RFC3339)}
	since := time.Now()
	if err := p.setAgentImage(ctx, r.From, req.Image, note); err != nil {
		return r, fmt.Errorf("the agent could not move %s to image %s: %w", r.Workload, req.Image, err)
	}
	progress(fmt.Sprintf("%s: image %s set (was %s), its new task to start before this one stops; waiting up to %s for it to run", r.Workload, req.Image, r.From, req.Wait))
	tasks, failed := p.awaitAgentImage(ctx, req.Image, since, req.Wait, false)
	if failed == "" {
		if err := p.endAgentUpdate(ctx, note, "done"); err != nil {
			progress(fmt.Sprintf("%s runs image %s, but its update_config could not be put back (%v): a docker stack deploy of it puts it back", r.Workload, req.Image, err))
		}
		r.Pods = tasks
		return r, nil
	}
	r.Failed = failed
	progress(fmt.Sprintf("the update failed: %s; setting image %s back", failed, r.From))
	note["ended"] = "rolled back: " + failed
	since = time.Now()
	if err := p.setAgentImage(ctx, req.Image, r.From, note); err != nil {
		r.UndoFailed = fmt.Sprintf("image %s could not be set back (%v): undo it with docker service update --rollback %s", r.From, err, svc.Spec.Name)
		return r, nil
	}
	if _, failed := p.awaitAgentImage(ctx, r.From, since, req.Wait, true); failed != "" {
		r.UndoFailed = fmt.Sprintf("image %s is set back, but %s (docker service ps %s)", r.From, failed, svc.Spec.Name)
	}
	return r, nil
}

// setAgentImage sets the image of the agent's service from from to to,
// and note as its labelAgentUpdate. Moving away from the image it runs,
// it saves the service's update_config in note and makes it start-first;
// moving back (note has "ended"), it puts the saved one back.
func (p *Platform) setAgentImage(ctx context.Context, from, to string, note map[string]any) error {
	return p.opts.Client.UpdateService(ctx, p.opts.Service, func(s *swarmapi.Service, spec swarmapi.RawSpec) error {
		if imageName(s.Spec.TaskTemplate.ContainerSpec.Image) != imageName(from) {
			return fmt.Errorf("its image changed meanwhile (it is no longer %s): try again", from)
		}
		if _, back := note["ended"]; back {
			putBackUpdateConfig(spec, note)
		} else {
			saved, ok := spec.Get("UpdateConfig")
			if !ok {
				saved = json.RawMessage("null")
			}
			note["update_config"] = saved
			spec.Set(json.RawMessage(`"start-first"`), "UpdateConfig", "Order")
		}
		image, _ := json.Marshal(to)
		spec.Set(image, "TaskTemplate", "ContainerSpec", "Image")
		text, _ := json.Marshal(note)
		spec.SetLabel(labelAgentUpdate, string(text))
		return nil
	})
}

// endAgentUpdate puts back the update_config that note saved, and says in
// labelAgentUpdate how the update ended.
func (p *Platform) endAgentUpdate(ctx context.Context, note map[string]any, ended string) error {
	note["ended"] = ended
	return p.opts.Client.UpdateService(ctx, p.opts.Service, func(_ *swarmapi.Service, spec swarmapi.RawSpec) error {
		putBackUpdateConfig(spec, note)
		text, _ := json.Marshal(note)
		spec.SetLabel(labelAgentUpdate, string(text))
		return nil
	})
}

// putBackUpdateConfig sets spec's UpdateConfig to the one note saved.
func putBackUpdateConfig(spec swarmapi.RawSpec, note map[string]any) {
	saved, _ := note["update_config"].(json.RawMessage)
	if saved == nil || string(saved) == "null" {
		spec.Delete("UpdateConfig")
		return
	}
	spec.Set(saved, "UpdateConfig")
}

// awaitAgentImage waits up to wait until a task of the agent's service
// runs image, and has for agentSettle, and returns the names of the
// agents of those that do (agentName); alone, when only is set, no task of another image being wanted. A
// task of image that fails or is rejected after since ends the wait: it
// returns why, as it does when wait is over.
func (p *Platform) awaitAgentImage(ctx context.Context, image string, since time.Time, wait time.Duration, only bool) ([]string, string) {
	var ids []string
	why := "no task of it runs yet"
	failed := ""
	err := poll(ctx, wait, func() (bool, error) {
		tasks, err := p.opts.Client.Tasks(ctx, map[string][]string{"service": {p.opts.Service}})
		if err != nil {
			why = err.Error()
			return false, nil
		}
		ids = nil
		others := false
		for _, t := range tasks {
			if t.Spec.ContainerSpec == nil || imageName(t.Spec.ContainerSpec.Image) != imageName(image) {
				others = others || t.DesiredState == "running"
				continue
			}
			switch st := t.Status.State; {
			case (st == "failed" || st == "rejected") && t.Status.Timestamp.After(since):
				failed = fmt.Sprintf("its task %s %s: %s", t.ID, st, strings.TrimSpace(t.Status.Message+" "+t.Status.Err))
				return true, nil
			case t.Running() && t.DesiredState == "running" && time.Since(t.Status.Timestamp) >= agentSettle:
				ids = append(ids, agentName(t))
			case t.DesiredState == "running":
				why = fmt.Sprintf("its task %s is %s", t.ID, st)
			}
		}
		return len(ids) > 0 && !(only && others), nil
	})
	switch {
	case failed != "":
		return nil, failed
	case err != nil:
		return nil, fmt.Sprintf("image %s did not run within %s: %s", image, wait, why)
	}
	return ids, ""
}

// agentName is the name the agent of task t goes by (tunnel.Agent.ID):
// its container's hostname, which the swarm makes the container ID's
// first 12 characters; its task ID when it has no container yet.
func agentName(t swarmapi.Task) string {
	if cs := t.Status.ContainerStatus; cs != nil && len(cs.ContainerID) >= 12 {
		return cs.ContainerID[:12]
	}
	return t.ID
}

// imageName is an image reference without the digest the swarm pins it to
// ("plug:2.31@sha256:..." is "plug:2.31").
func imageName(ref string) string {
	name, _, _ := strings.Cut(ref, "@")
	return name
}
