package swarmplatform

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"plug/swarmapi"
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
	if !errors.As(err, &held) || held.Holder.Run != "run-web" || !strings.Contains(err.Error(), "dev (key SHA256:test) since") {
		t.Fatalf("second run: got %v, want a HeldError naming run-web's developer and key", err)
	}
	if strings.Contains(err.Error(), "run-web") {
		t.Errorf("the refusal tells the holder's run id: %v", err)
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
	spec.Mode = swarmapi.ServiceMode{Global: &struct{}{}}
	spec.TaskTemplate.Placement = &swarmapi.Placement{Constraints: []string{"node.role==manager"}}
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

func TestServeRefusesAJob(t *testing.T) {
	s := needSwarm(t)
	t.Parallel()
	name := s.name("job")
	spec := s.workloadSpec(name, "pause")
	job := json.RawMessage(`{"MaxConcurrent":1,"TotalCompletions":1}`)
	spec.Mode = swarmapi.ServiceMode{ReplicatedJob: &job}
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
