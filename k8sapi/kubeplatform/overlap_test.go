package kubeplatform

import (
	"sync"
	"testing"
	"time"

	"plug/k8sapi/k8sapitest"
)

// A takeover waits for the API server once for reads that do not depend on
// each other, and once for deletions that do not: it reads plug's
// EndpointSlices while it reads the deployed pods, and deletes the legacy
// Endpoints while it deletes the controllers' slices. Each of the first
// of a pair is held until the second has arrived: made one after the
// other, the first would wait in vain.
func TestATakeoverOverlapsItsIndependentRequests(t *testing.T) {
	f := newFakeKube(t)
	f.deployWeb(t, 1)
	p := f.platform(t, f.agentPod(t, "agent-a"), nil)
	const wait = 10 * time.Second
	pair := func(first, second func(k8sapitest.Request) bool, what string) {
		arrived := make(chan struct{})
		var once sync.Once
		f.Inject(k8sapitest.Fault{Match: second, Before: func(k8sapitest.Request) { once.Do(func() { close(arrived) }) }})
		f.Inject(k8sapitest.Fault{Match: first, Times: 1, Before: func(k8sapitest.Request) {
			select {
			case <-arrived:
			case <-time.After(wait):
				t.Errorf("%s: the second request did not come while the first was held %v", what, wait)
			}
		}})
	}
	pair(k8sapitest.On("list", "pods", ""), k8sapitest.On("list", "endpointslices", ""), "the pods and plug's slices read")
	pair(k8sapitest.On("delete", "endpointslices", ""), k8sapitest.On("delete", "endpoints", "web"), "the controllers' slices and the Endpoints deleted")
	b := fakeRun("run-1", "web", 80, nil)
	if _, err := p.Serve(bg, b); err != nil {
		t.Fatal(err)
	}
	if got := f.slicesOf(t, "web"); len(got) != 1 || len(got[ManagedBy]) == 0 {
		t.Errorf("web's slices after the takeover, by writer: %v, want plug's only", got)
	}
}
