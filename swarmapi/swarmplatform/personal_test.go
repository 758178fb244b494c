package swarmplatform

import (
	"slices"
	"strings"
	"testing"

	"plug/tunnel"
	"plug/tunnel/tunneltest"
)

// A personal takeover parks the service as a full one does, and first
// runs a copy of it, under plug-deployed-NAME, with none of its aliases
// and no published port, whose tasks DeployedAddrs lists; the copy is
// left out of the names, kept running while the run is away, and removed
// when the name is given back, the service restored exactly. A full
// takeover runs no copy.
func TestPersonalTakeoverRunsACopyOfTheParkedService(t *testing.T) {
	f := newFakeSwarm(t)
	p := f.agent(t, "plug_agent", nil)
	id, original := f.deploy(t, "myapp_shop", 2, "shop")
	b := run("run-1", "shop", 8080)
	b.Filter = "header X-Dev=alice"
	served := tunneltest.Serve(t, p, b)
	if !served.TookOver || !strings.Contains(served.Detail, "its copy plug-deployed-shop runs meanwhile") {
		t.Errorf("Serve: %+v", served)
	}
	if n := f.running(t, id); n != 0 {
		t.Errorf("the parked service runs %d tasks", n)
	}
	cp, err := f.c.Service(bg, "plug-deployed-shop")
	if err != nil {
		t.Fatalf("the copy: %v", err)
	}
	spec := cp.Spec
	if spec.Labels[labelCopy] != "shop" || leaseOf(cp).Holder.Run != "run-1" || spec.EndpointMode() != "dnsrr" ||
		*spec.Mode.Replicated.Replicas != 2 || spec.TaskTemplate.ContainerSpec.Image != workloadImage {
		t.Errorf("the copy's spec: %+v", spec)
	}
	for _, n := range spec.NetworkAttachments() {
		if len(n.Aliases) > 0 {
			t.Errorf("the copy answers to %v on %s", n.Aliases, n.Target)
		}
	}
	if f.running(t, cp.ID) != 2 {
		t.Errorf("the copy runs %d tasks, want 2", f.running(t, cp.ID))
	}
	addrs, err := p.DeployedAddrs(b)
	if err != nil || len(addrs) != 2 || !strings.HasSuffix(addrs[0], ":8080") {
		t.Errorf("DeployedAddrs: %v, %v; want the copy's 2 tasks on 8080", addrs, err)
	}
	names, err := p.Names(bg)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(names, func(n tunnel.ClusterName) bool { return strings.HasPrefix(n.Name, "plug-deployed") }) {
		t.Errorf("the copy is among the names: %+v", names)
	}
	if p.wantAwake("shop", tunnel.RunRecord{Run: "run-1", Key: b.Holder.Developer, Away: true}) {
		t.Error("the parked service is woken while its run is away, beside the copy")
	}

	tunneltest.Release(t, p, b)
	f.restored(t, id, original, "after the personal takeover")
	if _, err := f.c.Service(bg, "plug-deployed-shop"); err == nil {
		t.Error("the copy is left after the name was given back")
	}

	full := run("run-2", "shop", 8080)
	tunneltest.Serve(t, p, full)
	if _, err := f.c.Service(bg, "plug-deployed-shop"); err == nil {
		t.Error("a full takeover runs a copy")
	}
	tunneltest.Release(t, p, full)
}

// A copy whose agent is gone is swept with its relay, and the service is
// restored.
func TestSweepRemovesTheCopyOfAGoneAgent(t *testing.T) {
	f := newFakeSwarm(t)
	id, original := f.deploy(t, "shop", 1)
	gone := f.agent(t, "agent_a", nil)
	b := run("run-1", "shop", 8080)
	b.Filter = "header X-Dev=alice"
	tunneltest.Serve(t, gone, b)
	if err := f.c.RemoveService(bg, "agent_a"); err != nil {
		t.Fatal(err)
	}
	live := f.agent(t, "agent_b", nil)
	if err := live.Sweep(bg); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.Service(bg, "plug-deployed-shop"); err == nil {
		t.Error("the copy of a gone agent's run is left after a sweep")
	}
	f.restored(t, id, original, "after the sweep")
}
