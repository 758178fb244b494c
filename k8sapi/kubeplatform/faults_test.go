package kubeplatform

import (
	"context"
	"strings"
	"testing"
	"time"

	"plug/k8sapi"
	"plug/k8sapi/k8sapitest"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
	"plug/tunnel/tunneltest/faults"
)

// annotate writes an annotation on Service name, as another writer would.
func (f *fakeKube) annotate(t *testing.T, name, key, value string) {
	t.Helper()
	if _, err := f.admin.Services(fakeNS).MergePatch(bg, name, map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{key: value}},
	}); err != nil {
		t.Error(err)
	}
}

// Another writer changing the Service between plug's read and its write
// makes the write conflict: plug reads again and writes on the fresh
// Service, keeping the other writer's change during the run and after.
func TestConflictingWriteMidTakeoverIsRetried(t *testing.T) {
	f := newFakeKube(t)
	f.deployWeb(t, 1)
	p := f.platform(t, f.agentPod(t, "agent-a"), nil)
	other := f.Inject(k8sapitest.Fault{Match: k8sapitest.On("patch", "services", "web"), Times: 1, Before: func(k8sapitest.Request) {
		f.annotate(t, "web", "reviewed-by", "ops")
	}})
	from := len(f.Requests())
	b := fakeRun("run-1", "web", 80, nil)
	tunneltest.Serve(t, p, b)
	// plug's first patch, the other writer's, and plug's on the fresh read.
	if other.Applied() != 1 || faults.Count(f.Requests()[from:], "patch services/web") != 3 {
		t.Errorf("patches of web: %d, want plug's to have conflicted and been made again", faults.Count(f.Requests()[from:], "patch services/web"))
	}
	svc := f.service(t, "web")
	if _, has, _ := receiptOf(svc); !has || svc.Metadata.Annotations["reviewed-by"] != "ops" || len(svc.Spec.Selector) != 0 {
		t.Errorf("while served: annotations %v, selector %v", svc.Metadata.Annotations, svc.Spec.Selector)
	}
	tunneltest.Release(t, p, b)
	svc = f.service(t, "web")
	if _, has, _ := receiptOf(svc); has || svc.Metadata.Annotations["reviewed-by"] != "ops" || svc.Spec.Selector["app"] != "web" {
		t.Errorf("after the run: annotations %v, selector %v", svc.Metadata.Annotations, svc.Spec.Selector)
	}
}

// A 409 answered to a write of a takeover after its patch (a slice, the
// legacy Endpoints) is retried from a fresh read, and the name ends up
// served exactly as its receipt says.
func TestConflictAnsweredMidTakeoverIsRetried(t *testing.T) {
	for _, match := range []func(k8sapitest.Request) bool{
		k8sapitest.On("create", "endpointslices", "web-plug"),
		k8sapitest.On("delete", "endpoints", "web"),
	} {
		f := newFakeKube(t)
		f.deployWeb(t, 1)
		p := f.platform(t, f.agentPod(t, "agent-a"), nil)
		in := f.Inject(k8sapitest.Fault{Match: match, Times: 1, Code: 409})
		tunneltest.Serve(t, p, fakeRun("run-1", "web", 80, nil))
		if in.Applied() != 1 {
			t.Fatalf("the fault applied %d times", in.Applied())
		}
		if byManager := f.slicesOf(t, "web"); len(byManager) != 1 || len(byManager[ManagedBy]) != 2 || f.exists(t, k8sapi.KindEndpoints, "web") {
			t.Errorf("after a 409 retried, slices by manager %v, legacy Endpoints there %v", byManager, f.exists(t, k8sapi.KindEndpoints, "web"))
		}
		if r := f.receipt(t, "web"); r.Holder.Run != "run-1" {
			t.Errorf("the receipt: %+v", r)
		}
	}
}

// A server error at any step after the takeover's patch fails the Serve
// and gives back what was changed: the Service is as it was, without a
// receipt, and plug left no slice.
func TestServerErrorMidTakeoverGivesEverythingBack(t *testing.T) {
	for _, match := range []func(k8sapitest.Request) bool{
		k8sapitest.On("list", "pods", ""),
		k8sapitest.On("create", "endpointslices", "web-plug-pods"),
		k8sapitest.On("delete", "endpointslices", "web-7x2kq"),
		k8sapitest.On("delete", "endpoints", "web"),
	} {
		f := newFakeKube(t)
		f.deployWeb(t, 1)
		before := f.snapshot(t, "web")
		p := f.platform(t, f.agentPod(t, "agent-a"), nil)
		in := f.Inject(k8sapitest.Fault{Match: match, Times: 1, Code: 500})
		_, err := p.Serve(bg, fakeRun("run-1", "web", 80, nil))
		if err == nil || !strings.Contains(err.Error(), "what was changed is given back") || in.Applied() != 1 {
			t.Fatalf("Serve with a 500 mid-way: %v (fault applied %d times), want a failure saying all is given back", err, in.Applied())
		}
		f.restored(t, "web", before, "after the failed takeover")
		if s := f.slicesOf(t, "web")[ManagedBy]; len(s) != 0 {
			t.Errorf("after the failed takeover, plug's slices are left: %v", s)
		}
		if len(p.heldNames()) != 0 {
			t.Errorf("the agent still holds %v", p.heldNames())
		}
	}
}

// When giving back a failed takeover fails too (here another writer keeps
// changing the Service), the Service keeps its receipt and the error says
// the sweep gives it back; the sweep of any agent does once the heartbeat
// is stale. Meanwhile the name is never left selecting nobody: the
// deployed pods' endpoints are still there.
func TestFailedUndoLeavesAReceiptTheSweepGivesBack(t *testing.T) {
	f, before := webKube(t, 1)
	p := f.platform(t, f.agentPod(t, "agent-a"), nil)
	f.Inject(k8sapitest.Fault{Match: k8sapitest.On("list", "pods", ""), Times: 1, Code: 503})
	storm := f.Inject(k8sapitest.Fault{Match: k8sapitest.On("patch", "services", "web"), Skip: 1, Code: 409})
	_, err := p.Serve(bg, fakeRun("run-1", "web", 80, nil))
	if err == nil || !strings.Contains(err.Error(), "carries its receipt") || !strings.Contains(err.Error(), "sweep") {
		t.Fatalf("Serve = %v, want a failure saying the receipt is left for the sweep", err)
	}
	storm.Remove()
	if r := f.receipt(t, "web"); r.Holder.Run != "run-1" {
		t.Fatalf("the receipt left: %+v", r)
	}
	if s := f.slicesOf(t, "web")["endpointslice-controller.k8s.io"]; len(s) != 1 {
		t.Errorf("the deployed pods' endpoints are gone while the receipt waits: %v", f.slicesOf(t, "web"))
	}

	sweeper := f.platform(t, f.agentPod(t, "agent-b"), nil)
	sweeper.sweep(bg, false)
	if _, has, _ := receiptOf(f.service(t, "web")); !has {
		t.Fatal("the sweep gave back a receipt whose heartbeat is fresh")
	}
	f.setHeartbeat(t, "web", time.Now().Add(-2*sweeper.times.Stale))
	sweeper.sweep(bg, false)
	f.restored(t, "web", before, "after the sweep")
}

// The API server unreachable in the middle of a run loses nothing: a Serve
// during the outage fails having changed nothing, a Release during it
// completes once the server is back, and the watches resume after it.
func TestAPIOutageMidRunLosesNothing(t *testing.T) {
	f := newFakeKube(t)
	f.deployWeb(t, 1)
	f.create(t, k8sapi.KindService, `{"metadata": {"name": "other"}, "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}`)
	before := f.snapshot(t, "web")
	p := f.platform(t, f.agentPod(t, "agent-a"), func(o *Options) { o.Heartbeat = 20 * time.Millisecond })
	tunneltest.Maintain(t, p)
	b := fakeRun("run-1", "web", 80, nil)
	tunneltest.Serve(t, p, b)

	f.SetDown(true)
	rv := f.ResourceVersion()
	ctx, cancel := context.WithTimeout(bg, 500*time.Millisecond)
	_, err := p.Serve(ctx, fakeRun("run-1", "other", 80, nil))
	cancel()
	if err == nil || !k8sapi.IsTemporary(err) {
		t.Fatalf("Serve in the outage: %v, want the failure to reach the server", err)
	}
	f.unchanged(t, rv, "a Serve in the outage")

	// The third attempt to read web after this ends the outage.
	back := f.Inject(k8sapitest.Fault{Match: k8sapitest.On("get", "services", "web"), Skip: 2, Times: 1, Before: func(k8sapitest.Request) { f.SetDown(false) }})
	ctx, cancel = context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	if err := p.Release(ctx, b); err != nil {
		t.Fatalf("Release across the outage: %v", err)
	}
	if back.Applied() != 1 {
		t.Fatal("Release returned while the API server was unreachable")
	}
	f.restored(t, "web", before, "after the run")

	// The guard's watches resumed: a slice deleted now is written again.
	tunneltest.Serve(t, p, fakeRun("run-2", "web", 80, nil))
	f.deleteSlice(t, "web-plug")
	f.waitAgentSlice(t, "web", "the agent's slice written again after the outage")
}

// A Release the outage outlasts fails saying the agent keeps trying; the
// agent gives the name back at its next heartbeat once the server is back.
func TestReleaseOutlastedByAnOutageIsRetriedByMaintain(t *testing.T) {
	f, before := webKube(t, 1)
	p := f.platform(t, f.agentPod(t, "agent-a"), func(o *Options) { o.Heartbeat = 20 * time.Millisecond })
	b := fakeRun("run-1", "web", 80, nil)
	tunneltest.Serve(t, p, b)
	f.SetDown(true)
	ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	err := p.Release(ctx, b)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "keeps trying") {
		t.Fatalf("Release in the outage = %v, want a failure saying the agent keeps trying", err)
	}
	f.SetDown(false)
	tunneltest.Maintain(t, p)
	clustertest.Eventually(t, clustertest.Settle, "web given back by the agent after the outage", func() error {
		return f.snapshot(t, "web").sameAs(before)
	})
}
