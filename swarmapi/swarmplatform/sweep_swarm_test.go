package swarmplatform

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"plug/swarmapi"
	"plug/tunnel"
	"plug/tunnel/clustertest"
)

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
	clustertest.Eventually(t, 30*time.Second, "the other agent's sweep gives the name back", func() error {
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
	if err := s.c.UpdateService(ctx, relay.ID, func(_ *swarmapi.Service, spec swarmapi.RawSpec) error {
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
