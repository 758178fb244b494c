package swarmapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"plug/tunnel"
)

func TestServeNewNameReachesTheSessionAndIsGoneAfterRelease(t *testing.T) {
	s := needSwarm(t)
	t.Parallel()
	ctx := context.Background()
	caller := s.caller(t)
	name := s.name("new")
	s.removeRelays(t, name)
	p := s.platform(t, "")
	b := tunnel.Binding{Name: name, Port: 8080, Target: s.serveLocal(t, "local"), Holder: holder("run-new")}

	served, err := p.Serve(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if served.TookOver || !strings.Contains(served.Detail, s.network.Name) {
		t.Errorf("served %+v", served)
	}
	s.answers(t, caller, "http://"+name+":8080/", "local", 3)

	// A second port of the same name, served by the same run.
	b2 := b
	b2.Port, b2.Target = 9090, s.serveLocal(t, "second")
	if _, err := p.Serve(ctx, b2); err != nil {
		t.Fatal(err)
	}
	s.answers(t, caller, "http://"+name+":9090/", "second", 2)
	s.answers(t, caller, "http://"+name+":8080/", "local", 2)

	if err := p.Release(ctx, b2); err != nil {
		t.Fatal(err)
	}
	s.answers(t, caller, "http://"+name+":8080/", "local", 2)
	if err := p.Release(ctx, b); err != nil {
		t.Fatal(err)
	}
	s.noRelay(t, name)
	s.unreachable(t, caller, "http://"+name+":8080/")
	if err := p.Release(ctx, b); err != nil {
		t.Fatalf("releasing twice: %v", err)
	}
}

func TestTakeOverParksTheServiceAndRestoresItExactly(t *testing.T) {
	s := needSwarm(t)
	t.Parallel()
	ctx := context.Background()
	caller := s.caller(t)
	name := s.name("web")
	s.removeRelays(t, name)
	spec := s.workloadSpec(name, "serve", "-name", "deployed", ":8080")
	spec.Mode = replicated(2)
	id := s.createService(t, spec, 2)
	s.answers(t, caller, "http://"+name+":8080/", "deployed", 4)
	original, _ := s.rawSpec(t, id)

	p := s.platform(t, "")
	b := tunnel.Binding{Name: name, Port: 8080, Target: s.serveLocal(t, "local"), Holder: holder("run-web")}
	served, err := p.Serve(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if !served.TookOver || !strings.Contains(served.Detail, "2 replicas") {
		t.Errorf("served %+v", served)
	}
	if n, _ := s.running(id); n != 0 {
		t.Errorf("the parked service runs %d tasks", n)
	}
	parked, svc := s.rawSpec(t, id)
	if parked.Label(labelReceipt) == "" {
		t.Error("the parked service carries no receipt")
	}
	s.answers(t, caller, "http://"+name+":8080/", "local", 4)

	// Another run asking for the name is refused and changes nothing.
	_, err = s.platform(t, "").Serve(ctx, tunnel.Binding{Name: name, Port: 8080, Target: 1, Holder: holder("run-other")})
	var held *tunnel.HeldError
	if !errors.As(err, &held) || held.Holder.Run != "run-web" || !strings.Contains(err.Error(), "run-web") {
		t.Fatalf("second run: got %v, want a HeldError naming run-web", err)
	}
	if _, after := s.rawSpec(t, id); after.Version != svc.Version {
		t.Errorf("the refused run changed the parked service (version %d -> %d)", svc.Version.Index, after.Version.Index)
	}

	if err := p.Release(ctx, b); err != nil {
		t.Fatal(err)
	}
	s.sameSpec(t, id, original)
	s.noRelay(t, name)
	s.waitTasks(t, id, 2)
	s.answers(t, caller, "http://"+name+":8080/", "deployed", 4)
}

// TestTakeOverOfAVIPServiceByItsAlias parks a service in the default VIP
// mode, named as a stack names it and served by its network alias. The
// local swarm has no IPVS, so its VIP never answers; what this machine can
// prove is that the parked service's names reach the session alone, and
// that the service comes back as it was.
func TestTakeOverOfAVIPServiceByItsAlias(t *testing.T) {
	s := needSwarm(t)
	t.Parallel()
	ctx := context.Background()
	caller := s.caller(t)
	alias := s.name("api")
	stackName := s.name("stack") + "_api" // as a stack names its service api
	s.removeRelays(t, alias)
	spec := s.workloadSpec(stackName, "serve", "-name", "deployed", ":8080")
	spec.Mode = replicated(1)
	spec.EndpointSpec = nil // vip
	spec.TaskTemplate.Networks[0].Aliases = []string{alias}
	id := s.createService(t, spec, 1)
	original, _ := s.rawSpec(t, id)

	p := s.platform(t, "")
	b := tunnel.Binding{Name: alias, Port: 8080, Target: s.serveLocal(t, "local"), Holder: holder("run-api")}
	if _, err := p.Serve(ctx, b); err != nil {
		t.Fatal(err)
	}
	s.answers(t, caller, "http://"+alias+":8080/", "local", 3)
	s.answers(t, caller, "http://"+stackName+":8080/", "local", 3)
	if err := p.Release(ctx, b); err != nil {
		t.Fatal(err)
	}
	s.sameSpec(t, id, original)
	s.waitTasks(t, id, 1)
	s.noRelay(t, alias)
}

func TestTakeOverOfAGlobalServiceParksItWithAConstraint(t *testing.T) {
	s := needSwarm(t)
	t.Parallel()
	ctx := context.Background()
	caller := s.caller(t)
	name := s.name("global")
	s.removeRelays(t, name)
	spec := s.workloadSpec(name, "serve", "-name", "deployed", ":8080")
	spec.Mode = ServiceMode{Global: &struct{}{}}
	spec.TaskTemplate.Placement = &Placement{Constraints: []string{"node.role==manager"}}
	id := s.createService(t, spec, 1)
	original, _ := s.rawSpec(t, id)

	p := s.platform(t, "")
	b := tunnel.Binding{Name: name, Port: 8080, Target: s.serveLocal(t, "local"), Holder: holder("run-global")}
	served, err := p.Serve(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if !served.TookOver || !strings.Contains(served.Detail, "global") {
		t.Errorf("served %+v", served)
	}
	_, svc := s.rawSpec(t, id)
	if !slices.Contains(svc.Spec.TaskTemplate.Placement.Constraints, parkedConstraint) {
		t.Errorf("parked constraints %v", svc.Spec.TaskTemplate.Placement.Constraints)
	}
	s.answers(t, caller, "http://"+name+":8080/", "local", 3)
	if err := p.Release(ctx, b); err != nil {
		t.Fatal(err)
	}
	s.sameSpec(t, id, original)
	s.waitTasks(t, id, 1)
	s.answers(t, caller, "http://"+name+":8080/", "deployed", 2)
}

// TestSweepGivesBackWhatAGoneAgentHeld runs an agent as a stand-in task,
// serves a new name and takes over a service through it, kills the task's
// container, and expects another agent's sweep to restore both.
func TestSweepGivesBackWhatAGoneAgentHeld(t *testing.T) {
	s := needSwarm(t)
	t.Parallel()
	ctx := context.Background()
	standIn := s.workloadSpec(s.name("agent"), "pause")
	standIn.Mode = replicated(1)
	agentSvc := s.createService(t, standIn, 1)
	tasks, err := s.c.Tasks(ctx, map[string][]string{"service": {agentSvc}, "desired-state": {"running"}})
	if err != nil || len(tasks) != 1 || tasks[0].Status.ContainerStatus == nil {
		t.Fatalf("the stand-in agent's task: %v", err)
	}
	agent := s.platform(t, tasks[0].ID)

	name := s.name("swept")
	s.removeRelays(t, name)
	spec := s.workloadSpec(name, "serve", "-name", "deployed", ":8080")
	spec.Mode = replicated(1)
	id := s.createService(t, spec, 1)
	original, _ := s.rawSpec(t, id)
	newName := s.name("sweptnew")
	s.removeRelays(t, newName)
	port := s.serveLocal(t, "local")
	for _, n := range []string{name, newName} {
		if _, err := agent.Serve(ctx, tunnel.Binding{Name: n, Port: 8080, Target: port, Holder: holder("run-swept")}); err != nil {
			t.Fatal(err)
		}
	}

	other := s.platform(t, "")
	if err := other.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if relays, _ := s.c.Services(ctx, map[string][]string{"label": {labelRelay + "=" + name}}); len(relays) != 1 {
		t.Fatal("the sweep gave back a name whose agent still runs")
	}

	if out, err := exec.Command(s.docker, "kill", tasks[0].Status.ContainerStatus.ContainerID).CombinedOutput(); err != nil {
		t.Fatalf("killing the agent's container: %v %s", err, out)
	}
	eventually(t, 30*time.Second, func() error {
		if err := other.Sweep(ctx); err != nil {
			return err
		}
		relays, err := s.c.Services(ctx, map[string][]string{"label": {labelRelay}})
		for _, r := range relays {
			if n := r.Spec.Labels[labelRelay]; n == name || n == newName {
				return fmt.Errorf("the relay of %s is still there", n)
			}
		}
		return err
	})
	s.sameSpec(t, id, original)
	s.waitTasks(t, id, 1)
}

func TestServeRefusesBadInputBeforeTouchingTheEngine(t *testing.T) {
	c := fakeEngine(t, "1.41", "1.12", func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the engine was asked %s %s", r.Method, r.URL.Path)
	})
	p := NewPlatform(Config{Client: c, Address: "10.0.0.2", Networks: []NetworkRef{{ID: "n1", Name: "app"}}, Image: "plug:dev"})
	for _, b := range []tunnel.Binding{
		{Name: "Web", Port: 80, Target: 1},
		{Name: "web_api", Port: 80, Target: 1},
		{Name: "-web", Port: 80, Target: 1},
		{Name: "web-", Port: 80, Target: 1},
		{Name: strings.Repeat("a", 64), Port: 80, Target: 1},
		{Name: "web", Port: 0, Target: 1},
		{Name: "web", Port: 70000, Target: 1},
		{Name: "web", Port: 80, Target: 0},
	} {
		b.Holder = holder("run-bad")
		var refusal *tunnel.RefusedError
		if _, err := p.Serve(context.Background(), b); !errors.As(err, &refusal) {
			t.Errorf("%s:%d->%d: got %v, want a refusal", b.Name, b.Port, b.Target, err)
		}
		if err := p.Release(context.Background(), b); err != nil {
			t.Errorf("releasing %q: %v", b.Name, err)
		}
	}
	var refusal *tunnel.RefusedError
	if _, err := p.Serve(context.Background(), tunnel.Binding{Name: "web", Port: 80, Target: 1}); !errors.As(err, &refusal) {
		t.Errorf("a binding without a run: got %v, want a refusal", err)
	}
}

func TestServeRefusesAJob(t *testing.T) {
	s := needSwarm(t)
	t.Parallel()
	name := s.name("job")
	spec := s.workloadSpec(name, "pause")
	job := json.RawMessage(`{"MaxConcurrent":1,"TotalCompletions":1}`)
	spec.Mode = ServiceMode{ReplicatedJob: &job}
	id := s.createService(t, spec, 1)
	_, before := s.rawSpec(t, id)
	_, err := s.platform(t, "").Serve(context.Background(), tunnel.Binding{Name: name, Port: 80, Target: 1, Holder: holder("run-job")})
	if err == nil || !strings.Contains(err.Error(), "is a job") {
		t.Fatalf("got %v", err)
	}
	if _, after := s.rawSpec(t, id); after.Version != before.Version {
		t.Error("the refused serve changed the job")
	}
	s.noRelay(t, name)
}

func TestRightsOnTheLocalSwarm(t *testing.T) {
	s := needSwarm(t)
	rights, err := s.platform(t, "").Rights(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rights {
		if !r.Required || !r.Granted {
			t.Errorf("%+v", r)
		}
	}
	if len(rights) != 4 || !strings.Contains(rights[1].Rule, "speaks 1.41") || !strings.Contains(rights[3].Rule, s.network.Name) {
		t.Errorf("rights %+v", rights)
	}

	noNetwork := NewPlatform(Config{Client: s.c})
	rights, err = noNetwork.Rights(context.Background())
	if err != nil || rights[3].Granted || !strings.Contains(rights[3].Fix, s.network.Name) {
		t.Errorf("without a network: %+v, %v", rights, err)
	}
	noSocket := NewPlatform(Config{Client: NewClient(t.TempDir() + "/docker.sock")})
	rights, err = noSocket.Rights(context.Background())
	if err != nil || rights[0].Granted || !strings.Contains(rights[0].Fix, "no Docker socket") {
		t.Fatalf("without a socket: %+v, %v", rights, err)
	}
}

func TestRightsOfAnEngineTooOld(t *testing.T) {
	c := fakeEngine(t, "1.40", "1.12", nil)
	rights, err := NewPlatform(Config{Client: c}).Rights(context.Background())
	if err != nil || !rights[0].Granted || rights[1].Granted || !strings.Contains(rights[1].Fix, "Docker 20.10 or newer") {
		t.Fatalf("%+v, %v", rights, err)
	}
}

func TestAgentConfigFromItsTask(t *testing.T) {
	s := needSwarm(t)
	t.Parallel()
	spec := s.workloadSpec(s.name("discover"), "pause")
	spec.Mode = replicated(1)
	id := s.createService(t, spec, 1)
	tasks, err := s.c.Tasks(context.Background(), map[string][]string{"service": {id}, "desired-state": {"running"}})
	if err != nil || len(tasks) != 1 {
		t.Fatal(err)
	}
	cfg, err := agentConfig(context.Background(), s.c, tasks[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Service != id || cfg.Node != s.node || !strings.HasPrefix(cfg.Image, s.workload) ||
		len(cfg.Networks) != 1 || cfg.Networks[0] != s.network || !strings.HasPrefix(cfg.Address, "198.19.") {
		t.Fatalf("config %+v", cfg)
	}
	if _, err := agentConfig(context.Background(), s.c, "nosuchtask"); err == nil || !strings.Contains(err.Error(), "names no task") {
		t.Fatalf("unknown task: %v", err)
	}
}

// TestHeartbeatTellsTheRunWhenTheTakeoverIsUndoneByOthers renews the
// heartbeat, then has somebody else scale the parked service back up (as
// a stack deploy would) and remove the relay, and expects the run to be
// told each time.
func TestHeartbeatTellsTheRunWhenTheTakeoverIsUndoneByOthers(t *testing.T) {
	s := needSwarm(t)
	t.Parallel()
	ctx := context.Background()
	name := s.name("beat")
	s.removeRelays(t, name)
	spec := s.workloadSpec(name, "serve", "-name", "deployed", ":8080")
	spec.Mode = replicated(1)
	id := s.createService(t, spec, 1)

	events := make(chan tunnel.Event, 10)
	p := s.platform(t, "")
	b := tunnel.Binding{Name: name, Port: 8080, Target: s.serveLocal(t, "local"), Holder: holder("run-beat"),
		Notify: func(e tunnel.Event) { events <- e }}
	if _, err := p.Serve(ctx, b); err != nil {
		t.Fatal(err)
	}
	relay, err := p.relayFor(ctx, name)
	if err != nil || relay == nil {
		t.Fatalf("relay: %v", err)
	}
	// Heartbeats have a one-second grain: age the one Serve wrote.
	if err := s.c.UpdateService(ctx, relay.ID, func(_ *Service, spec RawSpec) error {
		spec.SetLabel(labelHeartbeat, "2000-01-01T00:00:00Z")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	p.renew(ctx)
	if renewed, _ := p.relayFor(ctx, name); renewed == nil || time.Since(leaseOf(renewed).Heartbeat) > time.Minute {
		t.Fatal("the heartbeat was not renewed")
	}
	if len(events) > 0 {
		t.Fatalf("told %+v while nothing happened", <-events)
	}

	if out, err := exec.Command(s.docker, "service", "scale", "-d", name+"=1").CombinedOutput(); err != nil {
		t.Fatalf("scaling up by hand: %v %s", err, out)
	}
	p.renew(ctx)
	if e := <-events; e.Kind != tunnel.EventWarning || e.Name != name || !strings.Contains(e.Text, "runs again") {
		t.Fatalf("after the scale-up: %+v", e)
	}

	if err := s.c.RemoveService(ctx, relay.ID); err != nil {
		t.Fatal(err)
	}
	p.renew(ctx)
	if e := <-events; e.Kind != tunnel.EventEnded || !strings.Contains(e.Text, "no longer reaches this run") {
		t.Fatalf("after the relay's removal: %+v", e)
	}
	if err := p.Release(ctx, b); err != nil {
		t.Fatal(err)
	}
	if _, svc := s.rawSpec(t, id); svc.Spec.Labels[labelReceipt] != "" {
		t.Error("Release left the receipt of a run whose relay is gone")
	}
}

// TestAMovedRunIsNotReleasedByItsOldAgent serves a name through one agent,
// has the run serve it again through another (as after a reconnection to
// another replica), and expects the first agent's late Release, at the end
// of its grace, to leave the name with the second.
func TestAMovedRunIsNotReleasedByItsOldAgent(t *testing.T) {
	s := needSwarm(t)
	t.Parallel()
	ctx := context.Background()
	standIn := s.workloadSpec(s.name("agent"), "pause")
	standIn.Mode = replicated(1)
	agentSvc := s.createService(t, standIn, 1)
	tasks, err := s.c.Tasks(ctx, map[string][]string{"service": {agentSvc}, "desired-state": {"running"}})
	if err != nil || len(tasks) != 1 {
		t.Fatalf("the stand-in agent's task: %v", err)
	}
	first, second := s.platform(t, tasks[0].ID), s.platform(t, "")
	name := s.name("moved")
	s.removeRelays(t, name)
	b := tunnel.Binding{Name: name, Port: 8080, Target: s.serveLocal(t, "local"), Holder: holder("run-moved")}
	if _, err := first.Serve(ctx, b); err != nil {
		t.Fatal(err)
	}
	if _, err := second.Serve(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := first.Release(ctx, b); err != nil {
		t.Fatal(err)
	}
	relay, err := second.relayFor(ctx, name)
	if err != nil || relay == nil || leaseOf(relay).Task != "" {
		t.Fatalf("the old agent's release took the name from the new one: %v", err)
	}
	if err := second.Release(ctx, b); err != nil {
		t.Fatal(err)
	}
	s.noRelay(t, name)
}
