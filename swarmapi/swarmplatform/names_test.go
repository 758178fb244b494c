package swarmplatform

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"plug/swarmapi"
	"plug/swarmapi/swarmapitest"
	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// TestNamesTakePortsFromTheLabelTheSpecAndTheImage lists names from a fake
// engine: one service with the override label (a UDP port among them), one
// publishing a TCP and a UDP port whose image exposes more (one UDP), one on
// another network, a new name's relay, a takeover's relay and the service
// it parked, and a volume helper (told to no run). UDP ports are listed
// apart, for runs to reach over datagrams.
func TestNamesTakePortsFromTheLabelTheSpecAndTheImage(t *testing.T) {
	f := newFakeSwarm(t)
	f.AddNetwork("other", true)
	img := swarmapi.Image{RepoTags: []string{"web:1@sha256:abc"}}
	img.Config.ExposedPorts = map[string]struct{}{"8080/tcp": {}, "8443/tcp": {}, "53/udp": {}}
	f.AddImage(img)
	service := func(name, image, network string, labels map[string]string, aliases ...string) swarmapi.ServiceSpec {
		return swarmapi.ServiceSpec{Name: name, Labels: labels, TaskTemplate: swarmapi.TaskSpec{
			ContainerSpec: &swarmapi.ContainerSpec{Image: image},
			Networks:      []swarmapi.NetworkAttachmentConfig{{Target: network, Aliases: aliases}},
		}}
	}
	web := service("web", "web:1@sha256:abc", "app", nil)
	web.EndpointSpec = &swarmapi.EndpointSpec{Ports: []swarmapi.PortConfig{{Protocol: "tcp", TargetPort: 8080, PublishedPort: 30080}, {Protocol: "udp", TargetPort: 5353, PublishedPort: 30053}}}
	for _, spec := range []swarmapi.ServiceSpec{
		service("stack_api", "api:1", "app", map[string]string{labelExpose: "9000, 9001, 8125/udp"}, "api"),
		web,
		service("elsewhere", "x", "other", nil),
		service("db", fakeAgentImage, "app", map[string]string{labelRelay: "db", labelPorts: "5432:40001"}),
		service("plug-cache", fakeAgentImage, "app", map[string]string{labelRelay: "cache", labelPorts: "6379:40002"}, "cache", "stack_cache"),
		service("stack_cache", "cache:1", "app", map[string]string{labelReceipt: "{}"}, "cache"),
		service("plug-vol-web", fakeAgentImage, "app", map[string]string{labelVolume: "web", labelExpose: "445"}),
	} {
		f.create(t, spec)
	}
	p := newPlatform(t, Options{Client: f.c, Networks: []NetworkRef{{ID: f.app.ID, Name: "app"}}})
	names, err := p.Names(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []tunnel.ClusterName{
		{Name: "api", Aliases: []string{"stack_api"}, Ports: []int{9000, 9001}, UDPPorts: []int{8125}},
		{Name: "cache", Aliases: []string{"stack_cache"}, Ports: []int{6379}},
		{Name: "db", Ports: []int{5432}},
		// A volume helper's service: dialled for its run, told to none.
		{Name: "plug-vol-web", Ports: []int{445}, Unlisted: true},
		{Name: "web", Ports: []int{8080, 8443}, UDPPorts: []int{53, 5353}},
	}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("names\n got %+v\nwant %+v", names, want)
	}
}

// WatchNames publishes the names on the agent's networks at once and after
// every service event, never the agent's own service, also of a service
// created while its event stream was opening (which dockerd's stream does
// not follow yet); on a node that is no manager it returns at once.
func TestWatchNamesFollowsTheServiceEvents(t *testing.T) {
	f := newFakeSwarm(t)
	p := f.agent(t, "plug_agent", nil)
	f.deploy(t, "web", 1, "www")
	api := f.serviceSpec("api", 1)
	created := make(chan error, 1)
	var id string
	f.Inject(swarmapitest.Fault{Match: swarmapitest.On("events", ""), Times: 1, Before: func(swarmapitest.Request) {
		var err error
		id, err = f.c.CreateService(bg, api)
		created <- err
	}})
	w := tunneltest.WatchNames(t, p)
	next := func(want ...string) {
		t.Helper()
		if got := w.Next(t); !reflect.DeepEqual(got, want) {
			t.Fatalf("names %q, want %q", got, want)
		}
	}
	next("web [8080]")
	select {
	case err := <-created:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(clustertest.Settle):
		t.Fatal("WatchNames does not follow the engine's events")
	}
	next("api [8080]", "web [8080]")
	if err := f.c.RemoveService(bg, id); err != nil {
		t.Fatal(err)
	}
	next("web [8080]")
	if err := w.Stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("WatchNames ended with %v", err)
	}

	f.SetSwarm(swarmapi.SwarmInfo{LocalNodeState: "active"})
	err := p.WatchNames(bg, func([]tunnel.ClusterName) { t.Error("names published by a worker") })
	if err == nil || !strings.Contains(err.Error(), "not a swarm manager") {
		t.Errorf("WatchNames on a worker: %v, want the engine's refusal", err)
	}
}
