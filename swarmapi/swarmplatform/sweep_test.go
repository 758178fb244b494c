package swarmplatform

import (
	"fmt"
	"testing"
	"time"

	"plug/swarmapi"
	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// servedByA has agent A (its service plug_a) serve a new name "fresh"
// and take over "web"; it returns A, web's ID and its original spec.
func (f *fakeSwarm) servedByA(t *testing.T) (*Platform, string, swarmapi.RawSpec) {
	t.Helper()
	a := f.agent(t, "plug_a", nil)
	id, original := f.deploy(t, "web", 1)
	tunneltest.Serve(t, a, run("run-1", "fresh", 8080))
	tunneltest.Serve(t, a, run("run-1", "web", 8080))
	return a, id, original
}

// givenBack fails t unless both names of servedByA are given back.
func (f *fakeSwarm) givenBack(t *testing.T, id string, original swarmapi.RawSpec, when string) {
	t.Helper()
	if f.relay(t, "fresh") != nil || f.relay(t, "web") != nil {
		t.Errorf("%s: relays are left", when)
	}
	f.restored(t, id, original, when)
	if f.running(t, id) != 1 {
		t.Errorf("%s: web runs %d tasks", when, f.running(t, id))
	}
}

// Another agent's sweep leaves the names of a live agent alone, and gives
// them back once the agent's task has ended, or its service is gone.
func TestSweepGivesBackWhenTheHolderAgentIsGone(t *testing.T) {
	for _, gone := range []string{"task ended", "service removed"} {
		f := newFakeSwarm(t)
		a, id, original := f.servedByA(t)
		b := f.agent(t, "plug_b", nil)
		at := f.Index()
		if err := b.Sweep(bg); err != nil {
			t.Fatal(err)
		}
		f.unchanged(t, at, "a sweep while the holder lives")

		if gone == "task ended" {
			if err := f.EndTask(a.opts.Task, "failed", "killed"); err != nil {
				t.Fatal(err)
			}
		} else if err := f.c.RemoveService(bg, a.opts.Service); err != nil {
			t.Fatal(err)
		}
		if err := b.Sweep(bg); err != nil {
			t.Fatal(err)
		}
		f.givenBack(t, id, original, "after the sweep ("+gone+")")
	}
}

// A holder whose heartbeat is stale is gone, even while its task seems to
// run: any agent's sweep gives its names back.
func TestSweepGivesBackAStaleHolder(t *testing.T) {
	f := newFakeSwarm(t)
	_, id, original := f.servedByA(t)
	for _, name := range []string{"fresh", "plug-web"} {
		r, err := f.c.Services(bg, map[string][]string{"name": {name}})
		if err != nil || len(r) != 1 {
			t.Fatalf("the relay %s: %v", name, err)
		}
		f.update(t, r[0].ID, func(spec swarmapi.RawSpec) {
			spec.SetLabel(labelHeartbeat, time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
		})
	}
	if err := f.agent(t, "plug_b", nil).Sweep(bg); err != nil {
		t.Fatal(err)
	}
	f.givenBack(t, id, original, "after the sweep")
}

// A receipt whose relay is gone (removed by hand, or never started) is
// restored by the Release of the run that parked it, and by the sweep once
// its holder is gone.
func TestAReceiptWithoutItsRelayIsRestored(t *testing.T) {
	for _, by := range []string{"release", "sweep"} {
		f := newFakeSwarm(t)
		a, id, original := f.servedByA(t)
		if err := f.c.RemoveService(bg, f.relay(t, "web").ID); err != nil {
			t.Fatal(err)
		}
		if by == "release" {
			tunneltest.Release(t, a, run("run-1", "web", 8080))
		} else {
			if err := f.EndTask(a.opts.Task, "failed", "killed"); err != nil {
				t.Fatal(err)
			}
			if err := f.agent(t, "plug_b", nil).Sweep(bg); err != nil {
				t.Fatal(err)
			}
		}
		f.restored(t, id, original, "after the "+by)
	}
}

// A name whose holder is gone is given back first by a Serve of another
// run, which then takes it: the receipt records the service as deployed.
func TestServeGivesBackAGoneHoldersNameFirst(t *testing.T) {
	f := newFakeSwarm(t)
	a, id, original := f.servedByA(t)
	if err := f.EndTask(a.opts.Task, "failed", "killed"); err != nil {
		t.Fatal(err)
	}
	b := f.agent(t, "plug_b", nil)
	for _, name := range []string{"fresh", "web"} {
		tunneltest.Serve(t, b, run("run-2", name, 8080))
		if l := leaseOf(f.relay(t, name)); l.Holder.Run != "run-2" || l.Task != b.opts.Task {
			t.Errorf("%s is held by %+v", name, l)
		}
	}
	tunneltest.Release(t, b, run("run-2", "web", 8080))
	f.restored(t, id, original, "after the second run")
}

// Maintain renews the heartbeat of the relays held here, and tells the run
// when its name is lost or its parked service runs again.
func TestMaintainRenewsAndTellsTheRunWhatOthersUndid(t *testing.T) {
	f := newFakeSwarm(t)
	p := f.agent(t, "plug_agent", func(o *Options) { o.Heartbeat = 20 * time.Millisecond })
	id, _ := f.deploy(t, "web", 2)
	var fresh, web tunneltest.Events
	b := run("run-1", "fresh", 8080)
	b.Notify = fresh.Add
	tunneltest.Serve(t, p, b)
	b = run("run-1", "web", 8080)
	b.Notify = web.Add
	tunneltest.Serve(t, p, b)
	old := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	f.update(t, f.relay(t, "fresh").ID, func(spec swarmapi.RawSpec) { spec.SetLabel(labelHeartbeat, old.Format(time.RFC3339)) })

	tunneltest.Maintain(t, p)
	clustertest.Eventually(t, clustertest.Settle, "the heartbeat renewed", func() error {
		if l := leaseOf(f.relay(t, "fresh")); !l.Heartbeat.After(old) {
			return fmt.Errorf("the heartbeat is still %v", l.Heartbeat)
		}
		return nil
	})

	f.update(t, id, func(spec swarmapi.RawSpec) {
		spec.Set([]byte(`{"Replicated":{"Replicas":2}}`), "Mode")
	})
	web.Wait(t, tunnel.EventWarning, "the parked service runs again", clustertest.Settle)

	if err := f.c.RemoveService(bg, f.relay(t, "fresh").ID); err != nil {
		t.Fatal(err)
	}
	fresh.Wait(t, tunnel.EventEnded, "its relay service is gone", clustertest.Settle)
}
