package kubeplatform

import (
	"net/http"
	"testing"

	"plug/k8sapi"
	"plug/k8sapi/k8sapitest"
)

// endpointsLabels are the labels of the legacy Endpoints called name, and
// whether they exist.
func (f *fakeKube) endpointsLabels(t *testing.T, name string) (map[string]string, bool) {
	t.Helper()
	ep, err := k8sapi.Resources[k8sapi.Endpoints](f.admin, k8sapi.KindEndpoints, fakeNS).Get(bg, name)
	if k8sapi.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return ep.Metadata.Labels, true
}

// A takeover labels the Service's legacy Endpoints skip-mirror before it
// removes the selector, so that the mirroring controller, which copies the
// Endpoints of a Service without a selector, has nothing to copy in the
// moment before the agent deletes them.
func TestATakeoverKeepsTheEndpointsFromBeingMirrored(t *testing.T) {
	f := newFakeKube(t)
	f.deployWeb(t, 2)
	p := f.platform(t, f.agentPod(t, "agent-a"), nil)
	var labelsAtPark map[string]string
	var parkedWithEndpoints bool
	f.Inject(k8sapitest.Fault{Match: k8sapitest.On("patch", "services", "web"), Times: 1, Before: func(k8sapitest.Request) {
		labelsAtPark, parkedWithEndpoints = f.endpointsLabels(t, "web")
	}})
	if _, err := p.Serve(bg, fakeRun("run-1", "web", 80, nil)); err != nil {
		t.Fatal(err)
	}
	if !parkedWithEndpoints || labelsAtPark[LabelSkipMirror] != "true" {
		t.Errorf("when the Service was parked, its Endpoints (there: %v) had labels %v, want %s=true", parkedWithEndpoints, labelsAtPark, LabelSkipMirror)
	}
	if _, ok := f.endpointsLabels(t, "web"); ok {
		t.Error("the legacy Endpoints are still there after the takeover")
	}
}

// A takeover that fails after the label takes it off again: the Endpoints
// are left as they were.
func TestAFailedTakeoverTakesTheSkipMirrorLabelOff(t *testing.T) {
	f := newFakeKube(t)
	f.deployWeb(t, 1)
	p := f.platform(t, f.agentPod(t, "agent-a"), nil)
	f.Inject(k8sapitest.Fault{Match: k8sapitest.On("patch", "services", "web"), Code: http.StatusInternalServerError})
	if _, err := p.Serve(bg, fakeRun("run-1", "web", 80, nil)); err == nil {
		t.Fatal("the takeover succeeded though every patch of the Service failed")
	}
	labels, ok := f.endpointsLabels(t, "web")
	if !ok {
		t.Fatal("the legacy Endpoints are gone after a takeover that failed")
	}
	if v, has := labels[LabelSkipMirror]; has {
		t.Errorf("the Endpoints keep %s=%s after a takeover that failed", LabelSkipMirror, v)
	}
	if got := f.service(t, "web").Spec.Selector; got["app"] != "web" {
		t.Errorf("the Service's selector after a takeover that failed: %v", got)
	}
}

// Without the right to patch Endpoints (an optional rule), a takeover goes
// on as before and the agent says why once.
func TestATakeoverWithoutTheEndpointsPatchRight(t *testing.T) {
	f := newFakeKube(t)
	f.deployWeb(t, 1)
	p := f.platform(t, f.agentPod(t, "agent-a"), nil)
	denied := f.Inject(k8sapitest.Fault{Match: k8sapitest.On("patch", "endpoints", ""), Code: http.StatusForbidden})
	if _, err := p.Serve(bg, fakeRun("run-1", "web", 80, nil)); err != nil {
		t.Fatalf("a takeover without the right to patch Endpoints: %v", err)
	}
	if got := f.slicesOf(t, "web"); len(got) != 1 || len(got[ManagedBy]) == 0 {
		t.Errorf("web's slices after the takeover, by writer: %v, want plug's only", got)
	}
	if !p.mirrorForbidden.Load() {
		t.Error("the agent did not note that it may not patch Endpoints")
	}
	if denied.Applied() != 1 {
		t.Errorf("the agent asked to patch Endpoints %d times, want once", denied.Applied())
	}
}
