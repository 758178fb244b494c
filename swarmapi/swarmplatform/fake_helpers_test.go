package swarmplatform

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"plug/swarmapi"
	"plug/swarmapi/swarmapitest"
	"plug/tunnel"
)

// The unit tests of the platform run against swarmapitest's in-process
// engine: every call the platform makes is a real Engine API call over a
// unix socket, and the engine's orchestrator starts and stops tasks at
// once, but no container runs, so nothing is dialled.

const (
	fakeAgentImage = "plug:dev"
	workloadImage  = "plug-test/workload:1"
	agentPort      = 2000 // the agent's port a run's traffic arrives on
)

var bg = context.Background()

// fakeSwarm is a swarmapitest engine holding the application's overlay
// network "app", the agent's image and the workload's.
type fakeSwarm struct {
	*swarmapitest.Server
	c   *swarmapi.Client
	app swarmapi.Network
}

func newFakeSwarm(t *testing.T) *fakeSwarm {
	t.Helper()
	s := swarmapitest.NewServer()
	t.Cleanup(s.Close)
	f := &fakeSwarm{Server: s, c: s.Client(), app: s.AddNetwork("app", true)}
	s.AddImage(swarmapi.Image{RepoTags: []string{fakeAgentImage}})
	img := swarmapi.Image{RepoTags: []string{workloadImage}}
	img.Config.ExposedPorts = map[string]struct{}{"8080/tcp": {}}
	s.AddImage(img)
	return f
}

// agent runs an agent service called name on the app network, and returns
// the Platform of its task, as NewFromEnv makes it, with the options tune
// changes.
func (f *fakeSwarm) agent(t *testing.T, name string, tune func(*Options)) *Platform {
	t.Helper()
	id := f.create(t, swarmapi.ServiceSpec{
		Name:         name,
		TaskTemplate: swarmapi.TaskSpec{ContainerSpec: &swarmapi.ContainerSpec{Image: fakeAgentImage, Args: []string{"agent"}}, Networks: []swarmapi.NetworkAttachmentConfig{{Target: "app"}}},
		Mode:         replicated(1),
	})
	opts, err := agentOptions(bg, f.c, f.runningTask(t, id).ID)
	if err != nil {
		t.Fatal(err)
	}
	opts.Logf = func(format string, args ...any) { t.Logf(name+": "+format, args...) }
	if tune != nil {
		tune(&opts)
	}
	return newPlatform(t, opts)
}

// create creates the service of spec and returns its ID.
func (f *fakeSwarm) create(t *testing.T, spec swarmapi.ServiceSpec) string {
	t.Helper()
	id, err := f.c.CreateService(bg, spec)
	if err != nil {
		t.Fatalf("creating %s: %v", spec.Name, err)
	}
	return id
}

// deploy deploys the workload as the service name, with replicas tasks
// (global when replicas is 0) on the app network under aliases, and
// returns its ID and its spec as stored.
func (f *fakeSwarm) deploy(t *testing.T, name string, replicas uint64, aliases ...string) (string, swarmapi.RawSpec) {
	t.Helper()
	id := f.create(t, f.serviceSpec(name, replicas, aliases...))
	return id, f.rawSpec(t, id)
}

// serviceSpec is the spec deploy creates.
func (f *fakeSwarm) serviceSpec(name string, replicas uint64, aliases ...string) swarmapi.ServiceSpec {
	spec := swarmapi.ServiceSpec{
		Name:   name,
		Labels: map[string]string{"team": "a"},
		TaskTemplate: swarmapi.TaskSpec{
			ContainerSpec: &swarmapi.ContainerSpec{Image: workloadImage, Args: []string{"serve", ":8080"}},
			Networks:      []swarmapi.NetworkAttachmentConfig{{Target: "app", Aliases: aliases}},
		},
		Mode: replicated(replicas),
	}
	if replicas == 0 {
		spec.Mode = swarmapi.ServiceMode{Global: &struct{}{}}
		spec.TaskTemplate.Placement = &swarmapi.Placement{Constraints: []string{"node.role==manager"}}
	}
	return spec
}

// rawSpec is service id's spec as the engine sends it.
func (f *fakeSwarm) rawSpec(t *testing.T, id string) swarmapi.RawSpec {
	t.Helper()
	svc, err := f.c.Service(bg, id)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := svc.RawSpec()
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// restored fails t, saying when, unless service id's spec is original.
func (f *fakeSwarm) restored(t *testing.T, id string, original swarmapi.RawSpec, when string) {
	t.Helper()
	if got := f.rawSpec(t, id); !reflect.DeepEqual(got, original) {
		a, _ := json.Marshal(original)
		b, _ := json.Marshal(got)
		t.Errorf("%s: the spec is not the original:\nwant %s\ngot  %s", when, a, b)
	}
}

// running is how many tasks service id runs.
func (f *fakeSwarm) running(t *testing.T, id string) int {
	t.Helper()
	tasks, err := f.c.Tasks(bg, map[string][]string{"service": {id}})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, task := range tasks {
		if task.Running() {
			n++
		}
	}
	return n
}

// runningTask is the one running task of service id.
func (f *fakeSwarm) runningTask(t *testing.T, id string) swarmapi.Task {
	t.Helper()
	tasks, err := f.c.Tasks(bg, map[string][]string{"service": {id}, "desired-state": {"running"}})
	if err != nil || len(tasks) != 1 || !tasks[0].Running() {
		t.Fatalf("the running task of %s: %+v, %v", id, tasks, err)
	}
	return tasks[0]
}

// relay is plug's relay serving name, or nil.
func (f *fakeSwarm) relay(t *testing.T, name string) *swarmapi.Service {
	t.Helper()
	relays, err := f.c.Services(bg, map[string][]string{"label": {labelRelay + "=" + name}})
	if err != nil || len(relays) > 1 {
		t.Fatalf("the relays of %s: %d, %v", name, len(relays), err)
	}
	if len(relays) == 0 {
		return nil
	}
	return &relays[0]
}

// unchanged fails t if the swarm changed since its index was at.
func (f *fakeSwarm) unchanged(t *testing.T, at uint64, what string) {
	t.Helper()
	if now := f.Index(); now != at {
		t.Errorf("%s changed the swarm (index %d → %d)", what, at, now)
	}
}

// update changes service id as another writer would.
func (f *fakeSwarm) update(t *testing.T, id string, change func(swarmapi.RawSpec)) {
	t.Helper()
	err := f.c.UpdateService(bg, id, func(_ *swarmapi.Service, spec swarmapi.RawSpec) error {
		change(spec)
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// run is a binding of name:port to the agent's port for run id.
func run(id, name string, port int) tunnel.Binding {
	return tunnel.Binding{Name: name, Port: port, Target: agentPort, Holder: holder(id)}
}
