package swarmplatform

import (
	"context"
	"strings"
	"testing"
	"time"

	"plug/swarmapi"
	"plug/swarmapi/swarmapitest"
	"plug/tunnel/tunneltest"
	"plug/tunnel/tunneltest/faults"
)

// Another writer updating the service between plug's read and its write
// makes the engine refuse the write as out of sequence: plug reads again
// and parks the fresh spec, keeping the other writer's change during the
// run and after it.
func TestAnUpdateOutOfSequenceIsRetried(t *testing.T) {
	f := newFakeSwarm(t)
	p := f.agent(t, "plug_agent", nil)
	id, original := f.deploy(t, "web", 1)
	other := f.Inject(swarmapitest.Fault{Match: swarmapitest.On("service.update", "web"), Times: 1, Before: func(swarmapitest.Request) {
		f.update(t, id, func(spec swarmapi.RawSpec) { spec.SetLabel("reviewed-by", "ops") })
	}})
	from := len(f.Requests())
	b := run("run-1", "web", 8080)
	tunneltest.Serve(t, p, b)
	// plug's first update, the other writer's, and plug's on the fresh read.
	if other.Applied() != 1 || faults.Count(f.Requests()[from:], "service.update web") != 3 {
		t.Errorf("updates of web: %d, want plug's to have been refused and made again", faults.Count(f.Requests()[from:], "service.update web"))
	}
	if spec := f.rawSpec(t, id); spec.Label("reviewed-by") != "ops" || spec.Label(labelReceipt) == "" {
		t.Errorf("while served: labels %v", spec["Labels"])
	}
	tunneltest.Release(t, p, b)
	original.SetLabel("reviewed-by", "ops")
	f.restored(t, id, original, "after the run")
}

// A relay that cannot start (the engine refuses to create it, its image
// is missing, its tasks cannot be listed) fails the Serve and is removed;
// the service, which is parked only once its relay runs, is as it was.
func TestARelayThatCannotStartGivesTheServiceBack(t *testing.T) {
	for _, tc := range []struct {
		what  string
		tune  func(*Options)
		fault swarmapitest.Fault
		want  string
	}{
		{"refused", nil, swarmapitest.Fault{Match: swarmapitest.On("service.create", "plug-web"), Times: 1, Code: 500}, "injected by the test"},
		{"no image", func(o *Options) { o.Image = "plug:missing" }, swarmapitest.Fault{}, "cannot run: preparing No such image: plug:missing"},
		{"tasks unknown", nil, swarmapitest.Fault{Match: swarmapitest.On("task.list", ""), Times: 1, Code: 503}, "injected by the test"},
	} {
		f := newFakeSwarm(t)
		p := f.agent(t, "plug_agent", tc.tune)
		id, original := f.deploy(t, "web", 2)
		if tc.fault.Code != 0 {
			f.Inject(tc.fault)
		}
		_, err := p.Serve(bg, run("run-1", "web", 8080))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Serve = %v, want a failure saying %q", tc.what, err, tc.want)
		}
		f.restored(t, id, original, tc.what)
		if f.relay(t, "web") != nil || f.running(t, id) != 2 {
			t.Errorf("%s: a relay is left (%v), or web runs %d tasks", tc.what, f.relay(t, "web") != nil, f.running(t, id))
		}
	}
}

// When the park after the relay has started fails, and the relay's
// removal fails too, the service is as it was, the relay is left with its
// lease, and the error says the sweep retries; the run's Release removes
// the relay, and so does the sweep of any agent once the lease is stale.
func TestAFailedParkIsFinishedByReleaseOrTheSweep(t *testing.T) {
	for _, by := range []string{"release", "sweep"} {
		f := newFakeSwarm(t)
		p := f.agent(t, "plug_agent", nil)
		id, original := f.deploy(t, "web", 1)
		f.Inject(swarmapitest.Fault{Match: swarmapitest.On("service.update", "web"), Times: 1, Code: 500})
		remove := f.Inject(swarmapitest.Fault{Match: swarmapitest.On("service.remove", "plug-web"), Times: 1, Code: 500})
		b := run("run-1", "web", 8080)
		_, err := p.Serve(bg, b)
		if err == nil || !strings.Contains(err.Error(), "removing the relay plug-web failed too") || !strings.Contains(err.Error(), "the sweep retries") {
			t.Fatalf("Serve = %v, want a failure saying the sweep retries the relay's removal", err)
		}
		f.restored(t, id, original, "after the failed park")
		if remove.Applied() != 1 || f.relay(t, "web") == nil {
			t.Fatal("the failed removal left no relay")
		}
		if by == "release" {
			tunneltest.Release(t, p, b)
		} else if err := f.agent(t, "plug_other", func(o *Options) { o.Stale = time.Nanosecond }).Sweep(bg); err != nil {
			t.Fatal(err)
		}
		if f.relay(t, "web") != nil {
			t.Errorf("after the %s, the relay is left", by)
		}
		f.restored(t, id, original, "after the "+by)
	}
}

// The engine unreachable in the middle of a run loses nothing: a Serve
// during the outage fails having changed nothing, a Release during it
// fails saying the sweep gives the name back, and once the engine is back
// and the heartbeat stale, the sweep of any agent does.
func TestAnEngineOutageMidRunLosesNothing(t *testing.T) {
	f := newFakeSwarm(t)
	p := f.agent(t, "plug_agent", func(o *Options) { o.Heartbeat = 20 * time.Millisecond })
	tunneltest.Maintain(t, p)
	id, original := f.deploy(t, "web", 1)
	f.deploy(t, "other", 1)
	b := run("run-1", "web", 8080)
	tunneltest.Serve(t, p, b)

	f.SetDown(true)
	at := f.Index()
	ctx, cancel := context.WithTimeout(bg, time.Second)
	defer cancel()
	if _, err := p.Serve(ctx, run("run-1", "other", 8080)); err == nil {
		t.Fatal("Serve succeeded with the engine unreachable")
	}
	err := p.Release(ctx, b)
	if err == nil || !strings.Contains(err.Error(), "any agent's sweep gives it back") {
		t.Fatalf("Release in the outage = %v, want a failure saying the sweep gives the name back", err)
	}
	f.unchanged(t, at, "the outage")
	if p.relayHeld("web") != "" {
		t.Error("the agent still holds web after its Release, so its heartbeat keeps the sweep away")
	}

	f.SetDown(false)
	if err := f.agent(t, "plug_other", func(o *Options) { o.Stale = time.Nanosecond }).Sweep(bg); err != nil {
		t.Fatal(err)
	}
	f.restored(t, id, original, "after the sweep")
	if f.relay(t, "web") != nil {
		t.Error("the relay is left")
	}
}
