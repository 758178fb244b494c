package swarmplatform

import (
	"reflect"
	"strings"
	"testing"

	"plug/swarmapi"
)

// newPlatform is New(opts), failing the test on an error.
func newPlatform(t *testing.T, opts Options) *Platform {
	t.Helper()
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNewRequiresAClient(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Fatal("New without a client: no error")
	}
}

// An agent started as deploy/plug-swarm.yml starts it finds its task, and
// from it its service, node, image, address and networks.
func TestNewFromEnvFindsTheAgentsTask(t *testing.T) {
	f := newFakeSwarm(t)
	id := f.create(t, swarmapi.ServiceSpec{
		Name:         "plug_agent",
		TaskTemplate: swarmapi.TaskSpec{ContainerSpec: &swarmapi.ContainerSpec{Image: fakeAgentImage}, Networks: []swarmapi.NetworkAttachmentConfig{{Target: "app"}}},
	})
	task := f.runningTask(t, id)
	t.Setenv("DOCKER_HOST", "unix://"+f.Socket)
	t.Setenv("PLUG_SWARM_TASK", task.ID)
	p, err := NewFromEnv(bg, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	o := p.opts
	if o.Task != task.ID || o.Service != id || o.Node != f.NodeID || o.Image != fakeAgentImage ||
		!reflect.DeepEqual(o.Networks, []NetworkRef{{ID: f.app.ID, Name: "app"}}) || !strings.HasPrefix(o.Address, "10.0.") {
		t.Errorf("options %+v", o)
	}
	if p.String() != "Docker Swarm, network app" {
		t.Errorf("String() = %q", p.String())
	}

	t.Setenv("PLUG_SWARM_TASK", "nosuchtask")
	if _, err := NewFromEnv(bg, t.Logf); err == nil || !strings.Contains(err.Error(), "names no task") {
		t.Errorf("an unknown task: %v", err)
	}
	t.Setenv("PLUG_SWARM_TASK", "")
	if _, err := NewFromEnv(bg, t.Logf); err == nil || !strings.Contains(err.Error(), "PLUG_SWARM_TASK") {
		t.Errorf("outside a task's container: %v, want the hint to set PLUG_SWARM_TASK", err)
	}
}
