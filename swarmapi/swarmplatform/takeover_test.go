package swarmplatform

import (
	"encoding/json"
	"errors"
	"net"
	"reflect"
	"slices"
	"strings"
	"testing"

	"plug/swarmapi"
	"plug/swarmapi/swarmplatform/relay"
	"plug/tunnel"
	"plug/tunnel/tunneltest"
)

// A new name becomes a relay service of that name: one task of the
// agent's image on the agent's node and network, answering by DNS round
// robin and forwarding to the agent, carrying its lease. Release removes
// it, and releasing again changes nothing.
func TestServeANewNameStartsARelay(t *testing.T) {
	f := newFakeSwarm(t)
	p := f.agent(t, "plug_agent", nil)
	b := run("run-1", "fresh", 8080)
	served := tunneltest.Serve(t, p, b)
	if served.TookOver || !strings.Contains(served.Detail, "fresh:8080 reaches this session on app") {
		t.Errorf("Serve: %+v", served)
	}
	r := f.relay(t, "fresh")
	if r == nil || r.Spec.Name != "fresh" {
		t.Fatalf("the relay: %+v", r)
	}
	l := leaseOf(r)
	spec := r.Spec
	wantArgs := relay.Args([]relay.Route{{Listen: ":8080", To: net.JoinHostPort(p.opts.Address, "2000")}})
	if l.Holder.Run != "run-1" || l.Task != p.opts.Task || r.Spec.Labels[labelPorts] != "8080:2000" ||
		spec.TaskTemplate.ContainerSpec.Image != fakeAgentImage || !slices.Equal(spec.TaskTemplate.ContainerSpec.Args, wantArgs) ||
		spec.EndpointMode() != "dnsrr" || *spec.Mode.Replicated.Replicas != 1 ||
		!reflect.DeepEqual(spec.TaskTemplate.Placement.Constraints, []string{"node.id==" + f.NodeID}) ||
		len(spec.TaskTemplate.Networks) != 1 || spec.TaskTemplate.Networks[0].Target != f.app.ID {
		t.Errorf("the relay's lease %+v and spec %+v", l, spec)
	}
	if f.running(t, r.ID) != 1 {
		t.Error("the relay runs no task")
	}
	tunneltest.Release(t, p, b)
	if f.relay(t, "fresh") != nil {
		t.Error("the relay is left after the run")
	}
	at := f.Index()
	tunneltest.Release(t, p, b)
	f.unchanged(t, at, "releasing twice")
}

// A deployed service is parked: its receipt on it, scaled to zero, and a
// relay takes its names (its service name and aliases) on its networks.
// Another run is refused, changing nothing. Release restores the spec
// exactly and its tasks run again; a sweep after that changes nothing.
func TestTakeoverParksTheServiceAndRestoresItExactly(t *testing.T) {
	f := newFakeSwarm(t)
	p := f.agent(t, "plug_agent", nil)
	id, original := f.deploy(t, "web", 2, "www")
	b := run("run-1", "web", 8080)
	served := tunneltest.Serve(t, p, b)
	if !served.TookOver || !strings.Contains(served.Detail, "service web (2 replicas) is parked") {
		t.Errorf("Serve: %+v", served)
	}
	parked, err := f.c.Service(bg, id)
	if err != nil {
		t.Fatal(err)
	}
	r, has, err := receiptOf(parked)
	if !has || err != nil || r.Relay != "plug-web" || r.Holder.Run != "run-1" || *parked.Spec.Mode.Replicated.Replicas != 0 || f.running(t, id) != 0 {
		t.Errorf("the parked service: receipt %+v (%v), mode %+v, %d tasks", r, err, parked.Spec.Mode.Replicated, f.running(t, id))
	}
	if saved, _ := original.Get("Mode"); string(r.Saved["Mode"]) != string(saved) {
		t.Errorf("the receipt saved the mode %s, was %s", r.Saved["Mode"], saved)
	}
	rl := f.relay(t, "web")
	if rl == nil || rl.Spec.Name != "plug-web" || rl.Spec.Labels[labelParked] != id || f.running(t, rl.ID) != 1 {
		t.Fatalf("the takeover's relay: %+v", rl)
	}
	if nets := rl.Spec.TaskTemplate.Networks; len(nets) != 1 || nets[0].Target != f.app.ID || !slices.Equal(nets[0].Aliases, []string{"web", "www"}) {
		t.Errorf("the relay's networks: %+v, want app with the aliases web and www", nets)
	}

	other := f.agent(t, "plug_other", nil)
	at := f.Index()
	_, err = other.Serve(bg, run("run-2", "web", 8080))
	var held *tunnel.HeldError
	if !errors.As(err, &held) || held.Holder.Run != "run-1" {
		t.Errorf("another run: %v, want a HeldError naming run-1", err)
	}
	f.unchanged(t, at, "the refused run")

	tunneltest.Release(t, p, b)
	f.restored(t, id, original, "after the run")
	if f.running(t, id) != 2 || f.relay(t, "web") != nil {
		t.Errorf("after the run: %d tasks, relay %+v", f.running(t, id), f.relay(t, "web"))
	}
	at = f.Index()
	if err := p.Sweep(bg); err != nil {
		t.Fatal(err)
	}
	f.unchanged(t, at, "a sweep after the run")
}

// A global service is parked with a placement constraint no node matches,
// and its placement restored exactly.
func TestTakeoverOfAGlobalServiceParksItWithAConstraint(t *testing.T) {
	f := newFakeSwarm(t)
	p := f.agent(t, "plug_agent", nil)
	id, original := f.deploy(t, "cache", 0)
	if f.running(t, id) != 1 {
		t.Fatal("the global service runs no task")
	}
	b := run("run-1", "cache", 6379)
	if served := tunneltest.Serve(t, p, b); !strings.Contains(served.Detail, "(global) is parked") {
		t.Errorf("Serve: %+v", served)
	}
	svc, _ := f.c.Service(bg, id)
	if !slices.Contains(svc.Spec.TaskTemplate.Placement.Constraints, parkedConstraint) || f.running(t, id) != 0 {
		t.Errorf("the parked global service: constraints %v, %d tasks", svc.Spec.TaskTemplate.Placement.Constraints, f.running(t, id))
	}
	tunneltest.Release(t, p, b)
	f.restored(t, id, original, "after the run")
	if f.running(t, id) != 1 {
		t.Error("the restored global service runs no task")
	}
}

// A stack's service is served by its alias, and the run is told that a
// deploy of the stack ends the park.
func TestTakeoverOfAStackServiceByItsAlias(t *testing.T) {
	f := newFakeSwarm(t)
	p := f.agent(t, "plug_agent", nil)
	id, _ := f.deploy(t, "shop_api", 1, "api")
	f.update(t, id, func(spec swarmapi.RawSpec) { spec.SetLabel(labelStack, "shop") })
	original := f.rawSpec(t, id)
	var told []tunnel.Event
	b := run("run-1", "api", 8080)
	b.Notify = func(ev tunnel.Event) { told = append(told, ev) }
	tunneltest.Serve(t, p, b)
	if rl := f.relay(t, "api"); rl == nil || !slices.Equal(rl.Spec.TaskTemplate.Networks[0].Aliases, []string{"api", "shop_api"}) || f.running(t, id) != 0 {
		t.Errorf("the relay of api: %+v", rl)
	}
	if len(told) != 1 || told[0].Kind != tunnel.EventWarning || !strings.Contains(told[0].Text, "every docker stack deploy of shop") {
		t.Errorf("the run was told %+v", told)
	}
	tunneltest.Release(t, p, b)
	f.restored(t, id, original, "after the run")
}

// The run that holds a name serves more ports of it through its relay, and
// gives one back keeping the others.
func TestTheSameRunServesMorePortsOfItsName(t *testing.T) {
	f := newFakeSwarm(t)
	p := f.agent(t, "plug_agent", nil)
	tunneltest.Serve(t, p, run("run-1", "fresh", 8080))
	b := run("run-1", "fresh", 9090)
	b.Target = 2001
	tunneltest.Serve(t, p, b)
	r := f.relay(t, "fresh")
	if r.Spec.Labels[labelPorts] != "8080:2000,9090:2001" || len(r.Spec.TaskTemplate.ContainerSpec.Args) != 9 || f.running(t, r.ID) != 1 {
		t.Errorf("serving two ports: ports %q, args %v, %d tasks", r.Spec.Labels[labelPorts], r.Spec.TaskTemplate.ContainerSpec.Args, f.running(t, r.ID))
	}
	tunneltest.Release(t, p, b)
	if r = f.relay(t, "fresh"); r == nil || r.Spec.Labels[labelPorts] != "8080:2000" {
		t.Errorf("after giving 9090 back: %+v", r)
	}
	tunneltest.Release(t, p, run("run-1", "fresh", 8080))
	if f.relay(t, "fresh") != nil {
		t.Error("the relay is left after the last port")
	}
}

// A UDP port is served through the relay beside a TCP port of the same
// number: the relay listens on both, each to its own agent port, and the
// name's UDP port is among the names runs reach; giving the UDP port back
// keeps the TCP one.
func TestARunServesAUDPPortBesideATCPPortOfTheSameNumber(t *testing.T) {
	f := newFakeSwarm(t)
	p := f.agent(t, "plug_agent", nil)
	tunneltest.Serve(t, p, run("run-1", "stats", 8125))
	udp := run("run-1", "stats", 8125)
	udp.UDP, udp.Target = true, 2001
	if served := tunneltest.Serve(t, p, udp); !strings.Contains(served.Detail, "stats:8125") {
		t.Errorf("Serve: %+v", served)
	}
	r := f.relay(t, "stats")
	to := func(port string) string { return net.JoinHostPort(p.opts.Address, port) }
	wantArgs := relay.Args([]relay.Route{{Listen: ":8125", To: to("2000")}, {Listen: ":8125", To: to("2001"), UDP: true}})
	if r.Spec.Labels[labelPorts] != "8125:2000,8125/udp:2001" || !slices.Equal(r.Spec.TaskTemplate.ContainerSpec.Args, wantArgs) {
		t.Errorf("the relay: ports %q, args %v, want args %v", r.Spec.Labels[labelPorts], r.Spec.TaskTemplate.ContainerSpec.Args, wantArgs)
	}
	names, err := p.Names(bg)
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(names, func(n tunnel.ClusterName) bool { return n.Name == "stats" }); i < 0 ||
		!slices.Equal(names[i].Ports, []int{8125}) || !slices.Equal(names[i].UDPPorts, []int{8125}) {
		t.Errorf("the names runs reach: %+v, want stats with 8125 and 8125/udp", names)
	}
	tunneltest.Release(t, p, udp)
	if r = f.relay(t, "stats"); r == nil || r.Spec.Labels[labelPorts] != "8125:2000" {
		t.Errorf("after giving 8125/udp back: %+v", r)
	}
	tunneltest.Release(t, p, run("run-1", "stats", 8125))
}

// A run that reconnects through another agent is served from there; the
// agent it left gives nothing back for it.
func TestARunMovedToAnotherAgentKeepsItsName(t *testing.T) {
	f := newFakeSwarm(t)
	first, second := f.agent(t, "plug_a", nil), f.agent(t, "plug_b", nil)
	id, original := f.deploy(t, "web", 1)
	b := run("run-1", "web", 8080)
	tunneltest.Serve(t, first, b)
	tunneltest.Serve(t, second, b)
	if l := leaseOf(f.relay(t, "web")); l.Task != second.opts.Task {
		t.Errorf("after the move, the lease names task %s, want the second agent's", l.Task)
	}
	at := f.Index()
	tunneltest.Release(t, first, b)
	f.unchanged(t, at, "the old agent's release")
	tunneltest.Release(t, second, b)
	f.restored(t, id, original, "after the run")
}

// What plug must not serve is refused saying why, and nothing changes:
// the agent's own service, a takeover's relay, an alias of several
// services, a job, and any name for an agent on no overlay network.
func TestUnservableNamesAreRefusedChangingNothing(t *testing.T) {
	f := newFakeSwarm(t)
	p := f.agent(t, "plug-agent", nil)
	f.deploy(t, "web", 1)
	f.deploy(t, "one", 1, "shared")
	f.deploy(t, "two", 1, "shared")
	job := json.RawMessage(`{}`)
	f.create(t, swarmapi.ServiceSpec{Name: "migrate", TaskTemplate: swarmapi.TaskSpec{ContainerSpec: &swarmapi.ContainerSpec{Image: workloadImage}}, Mode: swarmapi.ServiceMode{ReplicatedJob: &job}})
	tunneltest.Serve(t, p, run("run-1", "web", 8080))
	lonely := f.agent(t, "plug-lonely", func(o *Options) { o.Networks = nil })
	at := f.Index()
	for _, tc := range []struct {
		p    *Platform
		name string
		want string
	}{
		{p, "plug-agent", "plug's own agent service"},
		{p, "plug-web", "is the relay plug runs for the served name web"},
		{p, "shared", "a network alias of several services (one, two)"},
		{p, "migrate", "is a job"},
		{lonely, "fresh", "on no overlay network"},
	} {
		_, err := tc.p.Serve(bg, run("run-2", tc.name, 8080))
		var refused *tunnel.RefusedError
		if !errors.As(err, &refused) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Serve(%s) = %v, want a refusal saying %q", tc.name, err, tc.want)
		}
	}
	f.unchanged(t, at, "the refused requests")
}
