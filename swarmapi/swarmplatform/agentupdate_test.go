package swarmplatform

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"plug/swarmapi"
	"plug/tunnel"
)

// updateTo asks p to move its agent's service to image.
func updateTo(t *testing.T, p *Platform, image string) (tunnel.AgentRollout, []string, error) {
	t.Helper()
	var told []string
	r, err := p.UpdateAgent(bg, tunnel.AgentUpdateRequest{Image: image, By: "dev (SHA256:test)", Wait: 20 * time.Second}, func(line string) { told = append(told, line) })
	return r, told, err
}

// agentUpdateNote is the agent service's labelAgentUpdate.
func (f *fakeSwarm) agentUpdateNote(t *testing.T, id string) map[string]any {
	t.Helper()
	svc, err := f.c.Service(bg, id)
	if err != nil {
		t.Fatal(err)
	}
	var note map[string]any
	if err := json.Unmarshal([]byte(svc.Spec.Labels[labelAgentUpdate]), &note); err != nil {
		t.Fatalf("the label %s: %v", labelAgentUpdate, err)
	}
	return note
}

// plug update --agent moves the agent's service to the image, once a task
// of it runs, with the service's update_config as it was and the update
// noted on it.
func TestUpdateAgentMovesItsServiceToTheImage(t *testing.T) {
	f := newFakeSwarm(t)
	f.AddImage(swarmapi.Image{RepoTags: []string{"plug:next"}})
	p := f.agent(t, "plug_agent", nil)
	r, told, err := updateTo(t, p, "plug:next")
	if err != nil || r.Failed != "" || r.Workload != "service/plug_agent" || r.From != fakeAgentImage || r.To != "plug:next" || len(r.Pods) != 1 {
		t.Fatalf("UpdateAgent: %+v, %v", r, err)
	}
	svc, _ := f.c.Service(bg, p.opts.Service)
	if svc.Spec.TaskTemplate.ContainerSpec.Image != "plug:next" || svc.Spec.UpdateConfig != nil {
		t.Errorf("the service's image %s, update_config %+v: want plug:next and none, as before", svc.Spec.TaskTemplate.ContainerSpec.Image, svc.Spec.UpdateConfig)
	}
	if note := f.agentUpdateNote(t, p.opts.Service); note["ended"] != "done" || note["by"] != "dev (SHA256:test)" {
		t.Errorf("the note: %v", note)
	}
	if len(told) != 1 || !strings.Contains(told[0], "image plug:next set (was plug:dev)") {
		t.Errorf("the developer was told %q", told)
	}
	if task := f.runningTask(t, p.opts.Service); agentName(task) != r.Pods[0] {
		t.Errorf("the task running is %s, the rollout names %v", task.ID, r.Pods)
	}
}

// An image whose task cannot run fails the update, which is undone: the
// previous image runs again, and the developer is told why.
func TestUpdateAgentUndoesAFailedUpdate(t *testing.T) {
	f := newFakeSwarm(t)
	p := f.agent(t, "plug_agent", nil)
	original := f.rawSpec(t, p.opts.Service)
	r, told, err := updateTo(t, p, "plug:nosuch")
	if err != nil || !strings.Contains(r.Failed, "No such image: plug:nosuch") || r.UndoFailed != "" {
		t.Fatalf("UpdateAgent: %+v, %v", r, err)
	}
	spec := f.rawSpec(t, p.opts.Service)
	spec.Delete("Labels") // the note of the update, which the original had no label beside
	if a, b := mustJSON(t, original), mustJSON(t, spec); a != b {
		t.Errorf("after the undo, the spec but its labels is not the original:\nwant %s\ngot  %s", a, b)
	}
	if note := f.agentUpdateNote(t, p.opts.Service); !strings.HasPrefix(fmt.Sprint(note["ended"]), "rolled back: ") {
		t.Errorf("the note: %v", note)
	}
	if task := f.runningTask(t, p.opts.Service); task.Spec.ContainerSpec.Image != fakeAgentImage {
		t.Errorf("the task running has image %s", task.Spec.ContainerSpec.Image)
	}
	if len(told) != 2 || !strings.Contains(told[1], "setting image plug:dev back") {
		t.Errorf("the developer was told %q", told)
	}
}

// The same image, a service publishing its port in host mode, and one
// naming its containers' hostname (which the new agent's name is) are
// refused, changing nothing.
func TestUpdateAgentRefusesChangingNothing(t *testing.T) {
	f := newFakeSwarm(t)
	p := f.agent(t, "plug_agent", nil)
	at := f.Index()
	if _, _, err := updateTo(t, p, fakeAgentImage); err == nil || !strings.Contains(err.Error(), "runs image plug:dev already") {
		t.Errorf("the same image: %v", err)
	}
	f.unchanged(t, at, "the same image")
	f.update(t, p.opts.Service, func(spec swarmapi.RawSpec) {
		spec.Set(json.RawMessage(`{"Ports":[{"Protocol":"tcp","TargetPort":2222,"PublishedPort":2222,"PublishMode":"host"}]}`), "EndpointSpec")
	})
	at = f.Index()
	if _, _, err := updateTo(t, p, "plug:next"); err == nil || !strings.Contains(err.Error(), "publishes its port in host mode") {
		t.Errorf("host mode: %v", err)
	}
	f.unchanged(t, at, "host mode")
	f.update(t, p.opts.Service, func(spec swarmapi.RawSpec) {
		spec.Delete("EndpointSpec")
		spec.Set(json.RawMessage(`"agent-{{.Task.Slot}}"`), "TaskTemplate", "ContainerSpec", "Hostname")
	})
	at = f.Index()
	if _, _, err := updateTo(t, p, "plug:next"); err == nil || !strings.Contains(err.Error(), "gives its containers the hostname agent-{{.Task.Slot}}") {
		t.Errorf("a hostname: %v", err)
	}
	f.unchanged(t, at, "a hostname")
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
