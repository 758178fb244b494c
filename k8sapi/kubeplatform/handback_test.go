package kubeplatform

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"plug/k8sapi"
	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// sliceLog follows the EndpointSlices of one Service and records, after
// each change, whether callers of its port named port still had a ready
// endpoint, and who the endpoints were.
type sliceLog struct {
	mu     sync.Mutex
	slices map[string]k8sapi.EndpointSlice
	states []string // after each change: the ready addresses of port, by slice
	gap    string   // the first state without a ready endpoint for port
}

func followSlices(t *testing.T, f *fakeKube, svc, port string) *sliceLog {
	l := &sliceLog{slices: map[string]k8sapi.EndpointSlice{}}
	ctx, cancel := context.WithCancel(bg)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.admin.EndpointSlices(fakeNS).Follow(ctx, k8sapi.ListOptions{LabelSelector: k8sapi.LabelServiceName + "=" + svc}, 10*time.Millisecond, k8sapi.Handler[k8sapi.EndpointSlice]{
			Synced: func(items []k8sapi.EndpointSlice) {
				l.mu.Lock()
				defer l.mu.Unlock()
				clear(l.slices)
				for _, s := range items {
					l.slices[s.Metadata.Name] = s
				}
				l.note(port)
			},
			Changed: func(ev k8sapi.Event[k8sapi.EndpointSlice]) {
				l.mu.Lock()
				defer l.mu.Unlock()
				if ev.Type == k8sapi.Deleted {
					delete(l.slices, ev.Object.Metadata.Name)
				} else {
					l.slices[ev.Object.Metadata.Name] = ev.Object
				}
				l.note(port)
			},
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return l
}

// note records the state now.
func (l *sliceLog) note(port string) {
	var parts []string
	ready := 0
	for _, name := range slices.Sorted(maps.Keys(l.slices)) {
		s := l.slices[name]
		if !slices.ContainsFunc(s.Ports, func(p k8sapi.EndpointPort) bool { return p.Name == port }) {
			continue
		}
		var ips []string
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				ips = append(ips, ep.Addresses...)
			}
		}
		ready += len(ips)
		parts = append(parts, name+"="+strings.Join(ips, ","))
	}
	state := strings.Join(parts, " ")
	l.states = append(l.states, state)
	if ready == 0 && l.gap == "" {
		l.gap = fmt.Sprintf("state %d: %q", len(l.states), state)
	}
}

func (l *sliceLog) report() (states []string, gap string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.states), l.gap
}

// endpointSliceController writes, delay after web has a selector again,
// the slice the EndpointSlice controller writes for it.
func (f *fakeKube) endpointSliceController(t *testing.T, delay time.Duration) {
	ctx, cancel := context.WithCancel(bg)
	done := make(chan struct{})
	var once sync.Once
	write := func(svc k8sapi.Service) {
		if svc.Metadata.Name != "web" || len(svc.Spec.Selector) == 0 {
			return
		}
		once.Do(func() {
			time.AfterFunc(delay, func() {
				f.create(t, k8sapi.KindEndpointSlice, fmt.Sprintf(`{"metadata": {"name": "web-n3w5l", "labels": {%q: "web", %q: "endpointslice-controller.k8s.io"}},
					"addressType": "IPv4", "endpoints": [{"addresses": ["10.1.0.1"], "conditions": {"ready": true}}, {"addresses": ["10.1.0.2"], "conditions": {"ready": true}}],
					"ports": [{"name": "http", "port": 8080}, {"name": "admin", "port": 9090}]}`, k8sapi.LabelServiceName, k8sapi.LabelSliceManagedBy))
			})
		})
	}
	go func() {
		defer close(done)
		f.admin.Services(fakeNS).Follow(ctx, k8sapi.ListOptions{}, 10*time.Millisecond, k8sapi.Handler[k8sapi.Service]{
			Synced: func(items []k8sapi.Service) {
				for _, svc := range items {
					write(svc)
				}
			},
			Changed: func(ev k8sapi.Event[k8sapi.Service]) { write(ev.Object) },
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// Give-back is make before break: plug's endpoints point the served port
// at the deployed pods before the agent's endpoint goes, the selector comes
// back, and plug's endpoints go only once the EndpointSlice controller
// lists the pods: at no moment has the port no ready endpoint.
func TestGiveBackNeverLeavesThePortWithoutEndpoints(t *testing.T) {
	f, before := webKube(t, 2)
	p := f.platform(t, f.agentPod(t, "agent-a"), func(o *Options) { o.HandBack = 10 * time.Second })
	b := fakeRun("run-1", "web", 80, nil)
	log := followSlices(t, f, "web", "http")
	if _, err := p.Serve(bg, b); err != nil {
		t.Fatal(err)
	}
	const controllerDelay = 300 * time.Millisecond
	f.endpointSliceController(t, controllerDelay)

	start := time.Now()
	if err := p.Release(bg, b); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	f.restored(t, "web", before, "after the give-back")
	if s := f.slicesOf(t, "web")[ManagedBy]; len(s) != 0 {
		t.Errorf("plug's slices are left: %v", s)
	}
	if took < controllerDelay {
		t.Errorf("the give-back took %v: it did not wait for the controller's slice (written %v after the selector)", took, controllerDelay)
	}
	clustertest.Eventually(t, clustertest.Settle, "the last slice change is seen", func() error {
		states, _ := log.report()
		if last := states[len(states)-1]; last != "web-n3w5l=10.1.0.1,10.1.0.2" {
			return fmt.Errorf("last state %q", last)
		}
		return nil
	})
	states, gap := log.report()
	t.Logf("the ready endpoints of port http, change by change:\n%s", strings.Join(states, "\n"))
	if gap != "" {
		t.Errorf("port http had no ready endpoint at %s", gap)
	}
	if !slices.ContainsFunc(states, func(s string) bool { return strings.Contains(s, "web-plug-pods=10.1.0.1,10.1.0.2") }) {
		t.Errorf("plug's slice never pointed port http at the deployed pods")
	}
}

// DialDeployed reaches a ready pod of the parked selector on the port the
// Service maps the caller's port to; a pod that is not ready is not
// tried; a name the run created has nothing deployed to reach.
func TestDialDeployedReachesAReadyPodOfTheParkedSelector(t *testing.T) {
	f := newFakeKube(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, "deployed")
			c.Close()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	f.create(t, k8sapi.KindPod, fmt.Sprintf(`{"metadata": {"name": "web-1", "labels": {"app": "web"}},
		"spec": {"containers": [{"name": "main", "ports": [{"name": "http", "containerPort": %d}]}]},
		"status": {"phase": "Running", "podIP": "127.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}}`, port))
	f.create(t, k8sapi.KindPod, `{"metadata": {"name": "web-2", "labels": {"app": "web"}},
		"spec": {"containers": [{"name": "main", "ports": [{"name": "http", "containerPort": 1}]}]},
		"status": {"phase": "Running", "podIP": "127.0.0.2", "conditions": [{"type": "Ready", "status": "False"}]}}`)
	f.create(t, k8sapi.KindService, `{"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}`)
	p := f.platform(t, f.agentPod(t, "agent-a"), nil)
	b := fakeRun("run-1", "web", 80, nil)
	if _, err := p.Serve(bg, b); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		c, err := p.DialDeployed(bg, b)
		if err != nil {
			t.Fatalf("DialDeployed: %v", err)
		}
		buf := make([]byte, 16)
		n, _ := c.Read(buf)
		c.Close()
		if got := string(buf[:n]); got != "deployed\n" {
			t.Fatalf("the deployed pod answered %q", got)
		}
	}
	created := fakeRun("run-1", "fresh", 80, nil)
	if _, err := p.Serve(bg, created); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DialDeployed(bg, created); err == nil || !strings.Contains(err.Error(), "no deployed service") {
		t.Errorf("DialDeployed of a name the run added: %v", err)
	}
	var _ tunnel.DeployedDialer = p
}

// A name handed from one run to another of the same agent (the personal
// takeovers of a name): the receipt names the new run, the guard tells
// neither run the name was lost and renews its heartbeat, the old run's
// Release changes nothing, and the new one's gives the Service back.
func TestMoveHolderHandsTheNameToTheNextRun(t *testing.T) {
	f, before := webKube(t, 2)
	p := f.platform(t, f.agentPod(t, "plug-agent-1"), nil)
	var aliceEvents, bobEvents tunneltest.Events
	alice, bob := fakeRun("run-alice", "web", 80, &aliceEvents), fakeRun("run-bob", "web", 80, &bobEvents)
	bob.Holder.Developer = "SHA256:bob"
	if _, err := p.Serve(bg, alice); err != nil {
		t.Fatal(err)
	}
	if err := p.MoveHolder(bg, alice, bob); err != nil {
		t.Fatal(err)
	}
	if got := f.receipt(t, "web").Holder.tunnel(); !got.SameRun(bob.Holder) {
		t.Fatalf("the receipt names %s, want bob's run", got)
	}
	p.tendAll(bg, true)
	if told := append(aliceEvents.Told(), bobEvents.Told()...); len(told) > 0 {
		t.Errorf("the runs were told %v", told)
	}
	if h := p.holdingOf("web"); h == nil || !h.owner.SameRun(bob.Holder) {
		t.Fatalf("the agent holds web for %+v, want bob's run", h)
	}
	if err := p.MoveHolder(bg, alice, bob); err == nil {
		t.Error("a second move from alice's run, which holds nothing, was accepted")
	}
	if err := p.Release(bg, alice); err != nil {
		t.Fatal(err)
	}
	if !f.receipt(t, "web").Holder.tunnel().SameRun(bob.Holder) {
		t.Fatal("alice's Release gave back what bob's run holds")
	}
	if err := p.Release(bg, bob); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, clustertest.Settle, "web restored", func() error { return f.snapshot(t, "web").sameAs(before) })
}
