package kubeplatform

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"plug/k8sapi"
	"plug/k8sapi/k8sapitest"
	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// The unit tests of the platform run against k8sapitest's in-process API
// server: every call the platform makes is a real REST call, but no
// controller runs, so each test writes what the controllers would.

const (
	fakeNS    = "shop"
	fakeNode  = "node-1"
	agentIP   = "10.1.0.100" // the address of every agent platform of the unit tests
	agentPort = 2000         // the agent's port a run's traffic arrives on
)

// fakeKube is a namespace of a k8sapitest server.
type fakeKube struct {
	*k8sapitest.Server
	admin *k8sapi.Client
}

func newFakeKube(t *testing.T) *fakeKube {
	t.Helper()
	s := k8sapitest.NewServer()
	t.Cleanup(s.Close)
	return &fakeKube{Server: s, admin: s.Client()}
}

// webKube returns a fakeKube where the sample workload "web" runs with
// replicas pods (see deployWeb), and the snapshot of its Service.
func webKube(t *testing.T, replicas int) (*fakeKube, snapshot) {
	t.Helper()
	f := newFakeKube(t)
	f.deployWeb(t, replicas)
	return f, f.snapshot(t, "web")
}

// platform returns a Platform acting as agent pod pod (may be "") on node
// fakeNode at agentIP, with the options tune changes.
func (f *fakeKube) platform(t *testing.T, pod string, tune func(*Options)) *Platform {
	t.Helper()
	return newPlatform(t, Options{Client: f.Client(), Namespace: fakeNS, PodName: pod, PodIP: agentIP, NodeName: fakeNode, Logf: t.Logf}, tune)
}

// restored fails t, saying when, unless Service name equals the snapshot
// before.
func (f *fakeKube) restored(t *testing.T, name string, before snapshot, when string) {
	t.Helper()
	if err := f.snapshot(t, name).sameAs(before); err != nil {
		t.Errorf("%s: %v", when, err)
	}
}

func (f *fakeKube) create(t *testing.T, kind k8sapi.Kind, obj string) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(obj), &m); err != nil {
		t.Fatalf("the test's %s: %v", kind.Name, err)
	}
	if _, err := k8sapi.Resources[map[string]any](f.admin, kind, fakeNS).Create(bg, &m); err != nil {
		t.Fatal(err)
	}
}

// pod writes a running, ready pod, as the kubelet would report it.
func (f *fakeKube) pod(t *testing.T, name, ip string, labels map[string]string) {
	t.Helper()
	l, _ := json.Marshal(labels)
	f.create(t, k8sapi.KindPod, fmt.Sprintf(`{"metadata": {"name": %q, "labels": %s},
		"spec": {"nodeName": %q, "containers": [{"name": "main", "ports": [{"name": "http", "containerPort": 8080}, {"name": "admin", "containerPort": 9090}]}]},
		"status": {"phase": "Running", "podIP": %q, "conditions": [{"type": "Ready", "status": "True"}]}}`, name, l, fakeNode, ip))
}

// deployWeb writes the sample workload "web" as a cluster would hold it:
// pods web-1..web-N (10.1.0.1..N) answering 8080 (port http) and 9090 (port
// admin), the Service web in front of them with labels and annotations of
// its own, the EndpointSlice controller's slice and the legacy Endpoints.
func (f *fakeKube) deployWeb(t *testing.T, replicas int) {
	t.Helper()
	var endpoints, addresses []string
	for i := 1; i <= replicas; i++ {
		ip := fmt.Sprintf("10.1.0.%d", i)
		f.pod(t, fmt.Sprintf("web-%d", i), ip, map[string]string{"app": "web"})
		endpoints = append(endpoints, fmt.Sprintf(`{"addresses": [%q], "conditions": {"ready": true}, "targetRef": {"kind": "Pod", "name": "web-%d"}}`, ip, i))
		addresses = append(addresses, fmt.Sprintf(`{"ip": %q}`, ip))
	}
	f.create(t, k8sapi.KindService, `{"metadata": {"name": "web", "labels": {"app": "web", "tier": "front"}, "annotations": {"owner": "team-a"}},
		"spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}, {"name": "admin", "port": 9090, "targetPort": 9090}]}}`)
	f.create(t, k8sapi.KindEndpointSlice, fmt.Sprintf(`{"metadata": {"name": "web-7x2kq", "labels": {%q: "web", %q: "endpointslice-controller.k8s.io"}},
		"addressType": "IPv4", "endpoints": [%s], "ports": [{"name": "http", "port": 8080}, {"name": "admin", "port": 9090}]}`,
		k8sapi.LabelServiceName, k8sapi.LabelSliceManagedBy, strings.Join(endpoints, ",")))
	f.create(t, k8sapi.KindEndpoints, fmt.Sprintf(`{"metadata": {"name": "web"}, "subsets": [{"addresses": [%s], "ports": [{"name": "http", "port": 8080}]}]}`,
		strings.Join(addresses, ",")))
}

// agentPod writes a running pod standing in for an agent replica.
func (f *fakeKube) agentPod(t *testing.T, name string) string {
	f.pod(t, name, agentIP, map[string]string{"app": "plug"})
	return name
}

func (f *fakeKube) snapshot(t *testing.T, name string) snapshot {
	t.Helper()
	return snapshotOf(t, f.admin, fakeNS, name)
}

func (f *fakeKube) slicesOf(t *testing.T, name string) map[string][]k8sapi.EndpointSlice {
	t.Helper()
	return slicesByManager(t, f.admin, fakeNS, name)
}

func (f *fakeKube) service(t *testing.T, name string) *k8sapi.Service {
	t.Helper()
	svc, err := f.admin.Services(fakeNS).Get(bg, name)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// receipt reads the receipt of Service name.
func (f *fakeKube) receipt(t *testing.T, name string) receipt {
	t.Helper()
	r, ok, err := receiptOf(f.service(t, name))
	if !ok || err != nil {
		t.Fatalf("the receipt of %s: present %v, %v", name, ok, err)
	}
	return r
}

// exists reports whether the object kind called name exists.
func (f *fakeKube) exists(t *testing.T, kind k8sapi.Kind, name string) bool {
	t.Helper()
	_, err := k8sapi.Resources[map[string]any](f.admin, kind, fakeNS).Get(bg, name)
	if err != nil && !k8sapi.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// writes are the requests that change objects, e.g. "patch services/web",
// since the request numbered from.
func (f *fakeKube) writes(from int) []string {
	var out []string
	for _, r := range f.Requests()[from:] {
		if r.Verb != "get" && r.Verb != "list" && r.Verb != "watch" && r.Resource != "selfsubjectaccessreviews" {
			out = append(out, r.String())
		}
	}
	return out
}

// unchanged fails t if anything was written since resourceVersion rv.
func (f *fakeKube) unchanged(t *testing.T, rv, what string) {
	t.Helper()
	if now := f.ResourceVersion(); now != rv {
		t.Errorf("%s changed the namespace (resourceVersion %s → %s)", what, rv, now)
	}
}

// endpointsOf are the addresses and target ports of plug's slice called
// name of Service svc, as "ip" and "name:port" lists; ok is false when
// there is no such slice.
func (f *fakeKube) endpointsOf(t *testing.T, svc, name string) (ips, ports []string, ok bool) {
	t.Helper()
	for _, s := range f.slicesOf(t, svc)[ManagedBy] {
		if s.Metadata.Name != name {
			continue
		}
		for _, ep := range s.Endpoints {
			ips = append(ips, ep.Addresses...)
		}
		for _, p := range s.Ports {
			ports = append(ports, fmt.Sprintf("%s:%d", p.Name, p.Port))
		}
		return ips, ports, true
	}
	return nil, nil, false
}

// fakeRun is a binding of name:port for run id, delivering its events to
// evs when evs is not nil.
func fakeRun(id, name string, port int, evs *tunneltest.Events) tunnel.Binding {
	b := runBinding(id, name, port, agentPort)
	if evs != nil {
		b.Notify = evs.Add
	}
	return b
}

// deleteSlice deletes the EndpointSlice called name, as someone else would.
func (f *fakeKube) deleteSlice(t *testing.T, name string) {
	t.Helper()
	if err := f.admin.EndpointSlices(fakeNS).Delete(bg, name, nil); err != nil {
		t.Fatal(err)
	}
}

// waitAgentSlice waits up to 5 s for the agent's slice of Service svc to
// be there, failing t saying what otherwise.
func (f *fakeKube) waitAgentSlice(t *testing.T, svc, what string) {
	t.Helper()
	clustertest.Eventually(t, clustertest.Settle, what, func() error {
		if _, _, ok := f.endpointsOf(t, svc, svc+"-plug"); !ok {
			return fmt.Errorf("slices %v", f.slicesOf(t, svc))
		}
		return nil
	})
}
