package swarmapitest_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"plug/swarmapi"
	"plug/swarmapi/swarmapitest"
	"plug/tunnel/clustertest"
)

var bg = context.Background()

func newServer(t *testing.T) (*swarmapitest.Server, *swarmapi.Client) {
	s := swarmapitest.NewServer()
	t.Cleanup(s.Close)
	s.AddImage(swarmapi.Image{RepoTags: []string{"web:1"}})
	return s, s.Client()
}

func webSpec(replicas uint64) swarmapi.ServiceSpec {
	return swarmapi.ServiceSpec{
		Name:         "web",
		Labels:       map[string]string{"team": "a"},
		TaskTemplate: swarmapi.TaskSpec{ContainerSpec: &swarmapi.ContainerSpec{Image: "web:1"}, Networks: []swarmapi.NetworkAttachmentConfig{{Target: "app", Aliases: []string{"www"}}}},
		Mode:         swarmapi.ServiceMode{Replicated: &swarmapi.ReplicatedService{Replicas: &replicas}},
	}
}

// running lists the IDs of the running tasks of service id.
func running(t *testing.T, c *swarmapi.Client, id string) []string {
	t.Helper()
	tasks, err := c.Tasks(bg, map[string][]string{"service": {id}, "desired-state": {"running"}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, task := range tasks {
		if task.Running() {
			ids = append(ids, task.ID)
		}
	}
	return ids
}

// The client negotiates the engine's API version; a version the engine
// does not speak is refused as dockerd refuses it.
func TestVersionNegotiation(t *testing.T) {
	s, c := newServer(t)
	if v, err := c.APIVersion(bg); err != nil || v != "1.41" {
		t.Errorf("negotiated %q, %v; want 1.41", v, err)
	}
	s.SetVersion(swarmapi.Version{Version: "29.0.0", APIVersion: "1.53", MinAPIVersion: "1.44"})
	if v, err := s.Client().APIVersion(bg); err != nil || v != swarmapi.MaxAPIVersion {
		t.Errorf("with a newer engine: %q, %v; want %s", v, err, swarmapi.MaxAPIVersion)
	}
	httpc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", s.Socket)
	}}}
	for path, want := range map[string]string{"/v1.54/info": "is too new", "/v1.41/info": "is too old"} {
		resp, err := httpc.Get("http://docker" + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400 saying the version %s", path, resp.StatusCode, want)
		}
	}
}

// A service's spec is stored as sent (network names resolved to IDs, the
// mode defaulted), found by ID, name or ID prefix; names are unique;
// updates must name the current version; a removed service and its tasks
// are gone.
func TestServicesAndTheirVersions(t *testing.T) {
	s, c := newServer(t)
	app := s.AddNetwork("app", true)
	spec := webSpec(1)
	spec.Mode = swarmapi.ServiceMode{}
	id, err := c.CreateService(bg, spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{id, "web", id[:6]} {
		svc, err := c.Service(bg, ref)
		if err != nil || svc.ID != id {
			t.Fatalf("inspecting %s: %+v, %v", ref, svc, err)
		}
	}
	svc, _ := c.Service(bg, id)
	if svc.Spec.TaskTemplate.Networks[0].Target != app.ID || *svc.Spec.Mode.Replicated.Replicas != 1 || svc.Endpoint.VirtualIPs[0].NetworkID != app.ID {
		t.Errorf("stored: %+v, endpoint %+v", svc.Spec, svc.Endpoint)
	}
	if _, err := c.CreateService(bg, webSpec(1)); !swarmapi.IsConflict(err) {
		t.Errorf("a second web: %v, want a conflict", err)
	}
	bad := webSpec(1)
	bad.Name, bad.TaskTemplate.Networks = "other", []swarmapi.NetworkAttachmentConfig{{Target: "nosuch"}}
	if _, err := c.CreateService(bg, bad); !swarmapi.IsNotFound(err) {
		t.Errorf("on a network that does not exist: %v, want not found", err)
	}
	raw, _ := svc.RawSpec()
	if err := c.UpdateServiceAt(bg, id, swarmapi.ObjectVersion{Index: svc.Version.Index - 1}, raw); !swarmapi.IsOutOfSequence(err) {
		t.Errorf("an update at an old version: %v, want out of sequence", err)
	}
	raw.SetLabel("b", "2")
	if err := c.UpdateServiceAt(bg, id, svc.Version, raw); err != nil {
		t.Fatal(err)
	}
	if now, _ := c.Service(bg, id); now.Version.Index <= svc.Version.Index || now.Spec.Labels["b"] != "2" {
		t.Errorf("after the update: version %d (was %d), labels %v", now.Version.Index, svc.Version.Index, now.Spec.Labels)
	}
	if err := c.RemoveService(bg, id); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Service(bg, id); !swarmapi.IsNotFound(err) {
		t.Errorf("after the remove: %v", err)
	}
	if tasks, _ := c.Tasks(bg, map[string][]string{"service": {id}}); len(tasks) != 0 {
		t.Errorf("tasks of a removed service: %+v", tasks)
	}
}

// The orchestrator runs what the specs ask for: replicas, a global
// service where its constraints admit the node, none without the image,
// a replacement for a task that ended or whose template changed.
func TestTheOrchestrator(t *testing.T) {
	s, c := newServer(t)
	s.AddNetwork("app", true)
	id, err := c.CreateService(bg, webSpec(2))
	if err != nil {
		t.Fatal(err)
	}
	first := running(t, c, id)
	if len(first) != 2 {
		t.Fatalf("2 replicas run %v", first)
	}
	if err := s.EndTask(first[0], "failed", "exit 1"); err != nil {
		t.Fatal(err)
	}
	if now := running(t, c, id); len(now) != 2 || now[0] == first[0] && now[1] == first[1] {
		t.Errorf("after a task failed: %v (were %v)", now, first)
	}
	err = c.UpdateService(bg, id, func(_ *swarmapi.Service, spec swarmapi.RawSpec) error {
		return spec.Set([]byte(`["serve"]`), "TaskTemplate", "ContainerSpec", "Args")
	})
	if err != nil {
		t.Fatal(err)
	}
	if now := running(t, c, id); len(now) != 2 || now[0] == first[1] || now[1] == first[1] {
		t.Errorf("after the template changed, tasks %v still include %s", now, first[1])
	}

	global := webSpec(0)
	global.Name, global.Mode = "agent", swarmapi.ServiceMode{Global: &struct{}{}}
	global.TaskTemplate.Placement = &swarmapi.Placement{Constraints: []string{"node.id!=" + s.NodeID}}
	gid, err := c.CreateService(bg, global)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(running(t, c, gid)); n != 0 {
		t.Errorf("a global service its constraint keeps off the node runs %d tasks", n)
	}

	missing := webSpec(1)
	missing.Name, missing.TaskTemplate.ContainerSpec.Image = "new", "new:1"
	nid, err := c.CreateService(bg, missing)
	if err != nil {
		t.Fatal(err)
	}
	tasks, _ := c.Tasks(bg, map[string][]string{"service": {nid}})
	if len(tasks) != 1 || tasks[0].Status.State != "rejected" || tasks[0].Status.Err != "No such image: new:1" {
		t.Errorf("without its image: %+v", tasks)
	}
	s.AddImage(swarmapi.Image{RepoTags: []string{"new:1"}})
	if n := len(running(t, c, nid)); n != 1 {
		t.Errorf("once the image is there, %d tasks run", n)
	}
	task, _ := c.Task(bg, running(t, c, nid)[0])
	ctr, err := c.Container(bg, task.Status.ContainerStatus.ContainerID[:12])
	if err != nil || ctr.Config.Labels["com.docker.swarm.task.id"] != task.ID || ctr.NetworkSettings.Networks["app"].IPAddress == "" {
		t.Errorf("the task's container: %+v, %v", ctr, err)
	}
}

// Lists filter as the engine does.
func TestFilters(t *testing.T) {
	_, c := newServer(t)
	for _, name := range []string{"web", "webhook", "db"} {
		spec := webSpec(1)
		spec.Name, spec.TaskTemplate.Networks = name, nil
		if name == "db" {
			spec.Labels = map[string]string{"team": "b", "tier": "data"}
		}
		if _, err := c.CreateService(bg, spec); err != nil {
			t.Fatal(err)
		}
	}
	for filter, want := range map[string][]string{
		"name=web":     {"web", "webhook"},
		"label=team":   {"web", "webhook", "db"},
		"label=tier":   {"db"},
		"label=team=a": {"web", "webhook"},
	} {
		k, v, _ := strings.Cut(filter, "=")
		svcs, err := c.Services(bg, map[string][]string{k: {v}})
		var got []string
		for _, s := range svcs {
			got = append(got, s.Spec.Name)
		}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %v, %v; want %v", filter, got, err, want)
		}
	}
	nets, err := c.Networks(bg, map[string][]string{"driver": {"overlay"}})
	if err != nil || len(nets) != 1 || !nets[0].Ingress {
		t.Errorf("overlay networks: %+v, %v", nets, err)
	}
}

// The event stream tells each change of a service; an outage cuts it.
func TestEventsAndOutages(t *testing.T) {
	s, c := newServer(t)
	events := make(chan swarmapi.Event, 8)
	ended := make(chan error, 1)
	following := make(chan struct{})
	s.Inject(swarmapitest.Fault{Match: swarmapitest.On("events", ""), Times: 1, Before: func(swarmapitest.Request) { close(following) }})
	since := time.Now()
	go func() {
		ended <- c.Events(bg, since, map[string][]string{"type": {"service"}}, func(e swarmapi.Event) { events <- e })
	}()
	<-following // the stream will see every event from now on, as it asked for those since
	spec := webSpec(1)
	spec.TaskTemplate.Networks = nil
	if _, err := c.CreateService(bg, spec); err != nil {
		t.Fatal(err)
	}
	created := <-events
	if created.Type != "service" || created.Action != "create" || created.Actor.Attributes["name"] != "web" {
		t.Errorf("event %+v", created)
	}
	if err := c.RemoveService(bg, created.Actor.ID); err != nil {
		t.Fatal(err)
	}
	if e := <-events; e.Action != "remove" || e.Actor.ID != created.Actor.ID {
		t.Errorf("event %+v, want the remove of %s", e, created.Actor.ID)
	}
	s.SetDown(true)
	select {
	case err := <-ended:
		if err == nil {
			t.Error("the event stream ended without an error in the outage")
		}
	case <-time.After(clustertest.Settle):
		t.Fatal("the outage did not cut the event stream")
	}
	if _, err := c.Services(bg, nil); err == nil {
		t.Error("a list succeeded in the outage")
	}
	s.SetDown(false)
	if _, err := c.Services(bg, nil); err != nil {
		t.Errorf("after the outage: %v", err)
	}
}

// A stream from a moment begins with the events kept from then on.
func TestEventsSince(t *testing.T) {
	_, c := newServer(t)
	beforeCreate := time.Now()
	spec := webSpec(1)
	spec.TaskTemplate.Networks = nil
	id, err := c.CreateService(bg, spec)
	if err != nil {
		t.Fatal(err)
	}
	afterCreate := time.Now()
	if err := c.RemoveService(bg, id); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		since time.Time
		first string
	}{{beforeCreate, "create"}, {afterCreate, "remove"}} {
		ctx, cancel := context.WithCancel(bg)
		first := make(chan swarmapi.Event, 1)
		go c.Events(ctx, tc.since, nil, func(e swarmapi.Event) {
			select {
			case first <- e:
			default:
			}
		})
		select {
		case e := <-first:
			if e.Action != tc.first || e.Actor.ID != id {
				t.Errorf("since %s: the first event is %s of %s, want %s of %s", tc.since, e.Action, e.Actor.ID, tc.first, id)
			}
		case <-time.After(clustertest.Settle):
			t.Errorf("since %s: no event within 5 s", tc.since)
		}
		cancel()
	}
}

// Faults answer chosen requests; a node that is no manager refuses the
// swarm's calls.
func TestFaultsAndWorkers(t *testing.T) {
	s, c := newServer(t)
	in := s.Inject(swarmapitest.Fault{Match: swarmapitest.On("service.list", ""), Skip: 1, Times: 1, Code: 500})
	var failed []bool
	for range 3 {
		_, err := c.Services(bg, nil)
		var e *swarmapi.Error
		failed = append(failed, errors.As(err, &e) && e.Status == 500)
	}
	if !reflect.DeepEqual(failed, []bool{false, true, false}) || in.Applied() != 1 {
		t.Errorf("a 500 on the 2nd list: %v, applied %d", failed, in.Applied())
	}
	s.SetSwarm(swarmapi.SwarmInfo{LocalNodeState: "active"})
	if _, err := c.Services(bg, nil); err == nil || !strings.Contains(err.Error(), "not a swarm manager") {
		t.Errorf("a worker's list: %v", err)
	}
	if info, err := c.Info(bg); err != nil || info.Swarm.ControlAvailable {
		t.Errorf("a worker's info: %+v, %v", info, err)
	}
}
