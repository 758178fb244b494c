package kubeplatform

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"plug/k8sapi"
	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// A new name becomes a Service of plug's, without a selector, carrying
// its receipt, with one EndpointSlice pointing the port at the agent pod;
// Release deletes both, and releasing again changes nothing.
func TestServeANewNameCreatesItsServiceAndSlice(t *testing.T) {
	f := newFakeKube(t)
	p := f.platform(t, f.agentPod(t, "agent-a"), nil)
	b := fakeRun("run-1", "fresh", 8080, nil)

	served, err := p.Serve(bg, b)
	if err != nil {
		t.Fatal(err)
	}
	if served.TookOver || !strings.Contains(served.Detail, "new name") {
		t.Errorf("Serve of a new name: %+v", served)
	}
	svc := f.service(t, "fresh")
	wantPorts := []k8sapi.ServicePort{{Name: "tcp-8080", Protocol: "TCP", Port: 8080, TargetPort: &k8sapi.IntOrString{Int: 8080}}}
	if svc.Metadata.Labels[LabelManagedBy] != ManagedBy || len(svc.Spec.Selector) != 0 || !reflect.DeepEqual(svc.Spec.Ports, wantPorts) {
		t.Errorf("the new Service: labels %v, selector %v, ports %+v", svc.Metadata.Labels, svc.Spec.Selector, svc.Spec.Ports)
	}
	r := f.receipt(t, "fresh")
	if !r.Created || r.Pod != "agent-a" || r.PodIP != agentIP || r.Holder.Run != "run-1" || !reflect.DeepEqual(r.Serves, []servedPort{{Port: 8080, Target: agentPort}}) {
		t.Errorf("the receipt: %+v", r)
	}
	if age := time.Since(heartbeatOf(svc)); age > time.Minute {
		t.Errorf("the heartbeat is %v old", age)
	}
	slices := f.slicesOf(t, "fresh")[ManagedBy]
	if len(slices) != 1 {
		t.Fatalf("plug's slices of fresh: %+v, want one", slices)
	}
	s := slices[0]
	ep := s.Endpoints[0]
	if s.Metadata.Name != "fresh-plug" || len(s.Endpoints) != 1 || ep.Addresses[0] != agentIP || ep.NodeName != fakeNode ||
		ep.TargetRef == nil || ep.TargetRef.Name != "agent-a" || ep.Conditions.Ready == nil || !*ep.Conditions.Ready {
		t.Errorf("the slice: %+v, endpoints %+v", s.Metadata, s.Endpoints)
	}
	if want := []k8sapi.EndpointPort{{Name: "tcp-8080", Port: agentPort, Protocol: "TCP"}}; !reflect.DeepEqual(s.Ports, want) {
		t.Errorf("the slice's ports: %+v, want %+v", s.Ports, want)
	}
	if o := s.Metadata.OwnerReferences; len(o) != 1 || o[0].UID != svc.Metadata.UID {
		t.Errorf("the slice's owner: %+v, want the Service %s", o, svc.Metadata.UID)
	}

	tunneltest.Release(t, p, b)
	if f.exists(t, k8sapi.KindService, "fresh") || len(f.slicesOf(t, "fresh")) != 0 {
		t.Errorf("after the run: Service there %v, slices %v", f.exists(t, k8sapi.KindService, "fresh"), f.slicesOf(t, "fresh"))
	}
	rv := f.ResourceVersion()
	if err := p.Release(bg, b); err != nil {
		t.Errorf("releasing twice: %v", err)
	}
	f.unchanged(t, rv, "releasing twice")
}

// A takeover is one conditional patch that removes the selector and
// writes the receipt; the controllers' slices and the legacy Endpoints
// go, the served port points at the agent and the unserved one at the
// deployed pods, the ClusterIP stays. Release restores the Service
// exactly; giving back again, or sweeping, changes nothing.
func TestTakeoverParksTheServiceAndReleaseRestoresItExactly(t *testing.T) {
	f := newFakeKube(t)
	f.deployWeb(t, 2)
	before, deployed := f.snapshot(t, "web"), f.service(t, "web")
	p := f.platform(t, f.agentPod(t, "agent-a"), nil)
	b := fakeRun("run-1", "web", 80, nil)
	from := len(f.Requests())

	served, err := p.Serve(bg, b)
	if err != nil {
		t.Fatal(err)
	}
	if !served.TookOver || !strings.Contains(served.Detail, "parked") || !strings.Contains(served.Detail, deployed.Spec.ClusterIP) {
		t.Errorf("Serve: %+v, want a takeover saying web is parked, its ClusterIP kept", served)
	}
	var patches []string
	for _, r := range f.Requests()[from:] {
		if r.String() == "patch services/web" {
			patches = append(patches, string(r.Body))
		}
	}
	if len(patches) != 1 {
		t.Fatalf("the takeover patched web %d times, want once: %v", len(patches), patches)
	}
	var ops []map[string]any
	json.Unmarshal([]byte(patches[0]), &ops)
	if len(ops) == 0 || ops[0]["op"] != "replace" || ops[0]["path"] != "/metadata/resourceVersion" || ops[0]["value"] != deployed.Metadata.ResourceVersion ||
		!strings.Contains(patches[0], `"path":"/spec/selector"`) || !strings.Contains(patches[0], AnnotationReceipt) {
		t.Errorf("the takeover's patch is not conditional on the version read, or lacks the selector or receipt: %s", patches[0])
	}

	svc := f.service(t, "web")
	r := f.receipt(t, "web")
	if len(svc.Spec.Selector) != 0 || svc.Spec.ClusterIP != deployed.Spec.ClusterIP || r.Created ||
		!reflect.DeepEqual(r.Original, &original{Selector: deployed.Spec.Selector, Ports: deployed.Spec.Ports}) {
		t.Errorf("while served: selector %v, ClusterIP %s (was %s), receipt %+v", svc.Spec.Selector, svc.Spec.ClusterIP, deployed.Spec.ClusterIP, r)
	}
	byManager := f.slicesOf(t, "web")
	if len(byManager) != 1 || len(byManager[ManagedBy]) != 2 {
		t.Errorf("while served, slices by manager: %v; want only plug's two", byManager)
	}
	if ips, ports, _ := f.endpointsOf(t, "web", "web-plug"); !slices.Equal(ips, []string{agentIP}) || !slices.Equal(ports, []string{"http:2000"}) {
		t.Errorf("the agent's slice: %v %v", ips, ports)
	}
	if ips, ports, _ := f.endpointsOf(t, "web", "web-plug-pods"); !slices.Equal(ips, []string{"10.1.0.1", "10.1.0.2"}) || !slices.Equal(ports, []string{"admin:9090"}) {
		t.Errorf("the deployed pods' slice of the unserved port: %v %v", ips, ports)
	}
	if f.exists(t, k8sapi.KindEndpoints, "web") {
		t.Error("the legacy Endpoints of web are left, which the mirroring controller would copy into a slice")
	}

	tunneltest.Release(t, p, b)
	f.restored(t, "web", before, "after the run")
	if s := f.slicesOf(t, "web")[ManagedBy]; len(s) != 0 {
		t.Errorf("after the run, plug's slices are left: %v", s)
	}
	rv := f.ResourceVersion()
	tunneltest.Release(t, p, b)
	p.sweep(bg, true)
	f.unchanged(t, rv, "a second give-back and a sweep")
}

// The run that holds a name serves another port of it, and gives one port
// back keeping the others; for a taken-over Service serving every port
// leaves no port to the deployed pods.
func TestTheSameRunExtendsItsName(t *testing.T) {
	f, before := webKube(t, 1)
	p := f.platform(t, f.agentPod(t, "agent-a"), nil)

	for _, port := range []int{8080, 9000} {
		tunneltest.Serve(t, p, fakeRun("run-1", "fresh", port, nil))
	}
	if r := f.receipt(t, "fresh"); !reflect.DeepEqual(r.Serves, []servedPort{{Port: 8080, Target: agentPort}, {Port: 9000, Target: agentPort}}) {
		t.Errorf("after a second port, the receipt serves %+v", r.Serves)
	}
	if _, ports, _ := f.endpointsOf(t, "fresh", "fresh-plug"); !slices.Equal(ports, []string{"tcp-8080:2000", "tcp-9000:2000"}) {
		t.Errorf("after a second port, the slice's ports: %v", ports)
	}
	tunneltest.Release(t, p, fakeRun("run-1", "fresh", 9000, nil))
	svc := f.service(t, "fresh")
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8080 {
		t.Errorf("after giving 9000 back, the Service's ports: %+v", svc.Spec.Ports)
	}
	if _, ports, _ := f.endpointsOf(t, "fresh", "fresh-plug"); !slices.Equal(ports, []string{"tcp-8080:2000"}) {
		t.Errorf("after giving 9000 back, the slice's ports: %v", ports)
	}

	for _, port := range []int{80, 9090} {
		served, err := p.Serve(bg, fakeRun("run-1", "web", port, nil))
		if err != nil || !served.TookOver {
			t.Fatalf("web:%d: %+v, %v", port, served, err)
		}
	}
	if _, ports, _ := f.endpointsOf(t, "web", "web-plug"); !slices.Equal(ports, []string{"http:2000", "admin:2000"}) {
		t.Errorf("serving both ports, the agent's slice: %v", ports)
	}
	if _, _, ok := f.endpointsOf(t, "web", "web-plug-pods"); ok {
		t.Error("serving every port, a slice still sends a port to the deployed pods")
	}
	tunneltest.Release(t, p, fakeRun("run-1", "web", 0, nil))
	f.restored(t, "web", before, "after giving every port back")
}

// A run that reconnects to another agent replica serves its name from
// there; the replica it left gives nothing back for it.
func TestARunReconnectedToAnotherReplicaMovesItsName(t *testing.T) {
	f, before := webKube(t, 1)
	a := f.platform(t, f.agentPod(t, "agent-a"), nil)
	b := f.platform(t, f.agentPod(t, "agent-b"), func(o *Options) { o.PodIP = "10.1.0.101" })
	run := fakeRun("run-1", "web", 80, nil)
	tunneltest.Serve(t, a, run)
	tunneltest.Serve(t, b, run)
	if r := f.receipt(t, "web"); r.Pod != "agent-b" || r.PodIP != "10.1.0.101" {
		t.Errorf("after the reconnect, the receipt names %s at %s", r.Pod, r.PodIP)
	}
	if ips, _, _ := f.endpointsOf(t, "web", "web-plug"); !slices.Equal(ips, []string{"10.1.0.101"}) {
		t.Errorf("after the reconnect, the agent's slice: %v", ips)
	}
	rv := f.ResourceVersion()
	tunneltest.Release(t, a, run)
	f.unchanged(t, rv, "a Release by the replica the run left")
	tunneltest.Release(t, b, run)
	f.restored(t, "web", before, "after the run")
}

// A name another run holds is refused naming the holder, on this replica
// and on another, and nothing changes; a Release by the refused run gives
// nothing back.
func TestServeHeldByAnotherRunIsRefusedChangingNothing(t *testing.T) {
	f := newFakeKube(t)
	f.deployWeb(t, 1)
	p := f.platform(t, f.agentPod(t, "agent-a"), nil)
	other := f.platform(t, f.agentPod(t, "agent-b"), nil)
	tunneltest.Serve(t, p, fakeRun("run-1", "web", 80, nil))
	rv := f.ResourceVersion()
	second := fakeRun("run-2", "web", 80, nil)
	second.Holder.User = "other"
	for _, agent := range []*Platform{p, other} {
		_, err := agent.Serve(bg, second)
		var he *tunnel.HeldError
		if !errors.As(err, &he) || he.Holder.Run != "run-1" || he.Holder.User != "dev" || he.Holder.Developer != "SHA256:test" {
			t.Errorf("second run via %s: %v, want a HeldError naming run-1 of dev", agent.pod, err)
		}
		tunneltest.Release(t, agent, second)
	}
	f.unchanged(t, rv, "the refused run")
}

// A binding that may not take over (PLUG_OPEN_SERVE=new) is refused
// for a deployed Service, changing nothing, and serves a new name.
func TestNoTakeoverRefusesADeployedServiceChangingNothing(t *testing.T) {
	f := newFakeKube(t)
	f.deployWeb(t, 1)
	p := f.platform(t, f.agentPod(t, "agent-a"), nil)
	rv := f.ResourceVersion()
	b := fakeRun("run-1", "web", 80, nil)
	b.NoTakeover = true
	if _, err := p.Serve(bg, b); !errors.Is(err, tunnel.ErrTakeoverNotAllowed) {
		t.Errorf("a takeover the binding does not allow: %v", err)
	}
	f.unchanged(t, rv, "the refused takeover")
	b = fakeRun("run-1", "fresh", 80, nil)
	b.NoTakeover = true
	if served := tunneltest.Serve(t, p, b); served.TookOver {
		t.Errorf("a new name: %+v", served)
	}
}

// Bad input and Services plug cannot serve are refused saying why, and
// nothing changes.
func TestUnservableRequestsAreRefusedChangingNothing(t *testing.T) {
	f := newFakeKube(t)
	f.deployWeb(t, 1)
	f.create(t, k8sapi.KindService, `{"metadata": {"name": "alias"}, "spec": {"type": "ExternalName", "externalName": "db.example.org"}}`)
	f.create(t, k8sapi.KindService, `{"metadata": {"name": "headless"}, "spec": {"clusterIP": "None", "selector": {"app": "web"}, "ports": [{"port": 80}]}}`)
	f.create(t, k8sapi.KindService, `{"metadata": {"name": "manual"}, "spec": {"ports": [{"port": 80}]}}`)
	f.create(t, k8sapi.KindService, `{"metadata": {"name": "scrawled", "annotations": {"plug.dev/receipt": "{not json"}}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}`)
	p := f.platform(t, f.agentPod(t, "agent-a"), nil)
	rv := f.ResourceVersion()
	for _, tc := range []struct {
		name string
		port int
		want string
	}{
		{"Bad_Name", 80, "not a valid cluster name"},
		{"web", 0, "out of range"},
		{"web", 8081, "not on 8081/TCP"},
		{"alias", 80, "ExternalName"},
		{"headless", 80, "headless"},
		{"manual", 80, "has no selector"},
		{"scrawled", 80, "not a receipt plug can read"},
	} {
		_, err := p.Serve(bg, fakeRun("run-1", tc.name, tc.port, nil))
		var refused *tunnel.RefusedError
		if !errors.As(err, &refused) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Serve(%s:%d) = %v, want a refusal saying %q", tc.name, tc.port, err, tc.want)
		}
	}
	f.unchanged(t, rv, "the refused requests")
}

// plug's own Service (the one that selects the agent's pod), a Service
// plug made for a feature of its own and one the cluster admin protects
// are refused, saying why, and nothing changes; plug's own is not among
// the names runs reach.
func TestPlugsOwnAndProtectedServicesAreNeverServed(t *testing.T) {
	f := newFakeKube(t)
	f.deployWeb(t, 1)
	f.create(t, k8sapi.KindService, `{"metadata": {"name": "plug", "labels": {"app.kubernetes.io/name": "plug"}}, "spec": {"type": "NodePort", "selector": {"app": "plug"}, "ports": [{"name": "ssh", "port": 2222}]}}`)
	f.create(t, k8sapi.KindService, `{"metadata": {"name": "smb-helper", "labels": {"app.kubernetes.io/managed-by": "plug"}}, "spec": {"selector": {"app": "smb-helper"}, "ports": [{"port": 445}]}}`)
	f.create(t, k8sapi.KindService, `{"metadata": {"name": "payments", "annotations": {"plug.dev/protect": "true"}}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}`)
	p := f.platform(t, f.agentPod(t, "agent-a"), func(o *Options) { o.PodLabels = map[string]string{"app": "plug", "pod-template-hash": "abc"} })
	rv := f.ResourceVersion()
	for _, tc := range []struct {
		name string
		port int
		want string
	}{
		{"plug", 2222, "plug's own Service"},
		{"smb-helper", 445, "a feature of its own"},
		{"payments", 80, `protected by the cluster admin (annotation plug.dev/protect: "true")`},
	} {
		_, err := p.Serve(bg, fakeRun("run-1", tc.name, tc.port, nil))
		var refused *tunnel.RefusedError
		if !errors.As(err, &refused) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Serve(%s:%d) = %v, want a refusal saying %q", tc.name, tc.port, err, tc.want)
		}
	}
	f.unchanged(t, rv, "the refused requests")

	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	names := make(chan []tunnel.ClusterName, 1)
	go p.WatchNames(ctx, func(n []tunnel.ClusterName) {
		select {
		case names <- n:
		default:
		}
	})
	var got []string
	for _, n := range <-names {
		got = append(got, n.Name)
	}
	if !slices.Equal(got, []string{"payments", "smb-helper", "web"}) {
		t.Errorf("the names runs reach: %v", got)
	}
}

// The names of the cluster's own Services (the API server's, the DNS's)
// are refused by default, saying why and how the operator allows them,
// and nothing is created: a Service kubernetes in the agent's namespace
// would answer the pods there calling the API server by its short name.
// With PLUG_ALLOW_SHADOWING=true (AllowShadowing) they are served.
func TestTheClusterOwnNamesAreNotShadowedUnlessAllowed(t *testing.T) {
	f := newFakeKube(t)
	p := f.platform(t, f.agentPod(t, "agent-a"), nil)
	rv := f.ResourceVersion()
	for _, name := range []string{"kubernetes", "kube-dns"} {
		_, err := p.Serve(bg, fakeRun("run-1", name, 443, nil))
		var refused *tunnel.RefusedError
		if !errors.As(err, &refused) || !strings.Contains(err.Error(), "one of the cluster's own Services") || !strings.Contains(err.Error(), "PLUG_ALLOW_SHADOWING=true") {
			t.Errorf("Serve(%s:443) = %v, want a refusal naming the switch", name, err)
		}
	}
	f.unchanged(t, rv, "the refused requests")
	allowed := f.platform(t, f.agentPod(t, "agent-b"), func(o *Options) { o.AllowShadowing = true })
	if _, err := allowed.Serve(bg, fakeRun("run-2", "kubernetes", 443, nil)); err != nil {
		t.Errorf("Serve(kubernetes:443) with shadowing allowed: %v", err)
	}
}

// Taking over a Service a GitOps controller manages tells the run which
// controller and the remedy, before anything else.
func TestTakeoverOfAManagedServiceWarnsTheRun(t *testing.T) {
	f := newFakeKube(t)
	f.deployWeb(t, 1)
	if _, err := f.admin.Services(fakeNS).MergePatch(bg, "web", map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{annotationArgoTracking: "shop:/Service:shop/web"}},
	}); err != nil {
		t.Fatal(err)
	}
	p := f.platform(t, f.agentPod(t, "agent-a"), nil)
	var evs tunneltest.Events
	tunneltest.Serve(t, p, fakeRun("run-1", "web", 80, &evs))
	ev := evs.Wait(t, tunnel.EventWarning, "managed by Argo CD", clustertest.Settle)
	if !strings.Contains(ev.Text, "ignoreDifferences") {
		t.Errorf("the warning gives no remedy: %s", ev.Text)
	}
}

// A name whose receipt names a holder that is gone is given back first,
// then served: the new receipt records the deployed Service as it was,
// not as the gone holder left it.
func TestServeGivesBackAGoneHoldersReceiptFirst(t *testing.T) {
	f := newFakeKube(t)
	f.deployWeb(t, 1)
	before, deployed := f.snapshot(t, "web"), f.service(t, "web")
	old := f.platform(t, f.agentPod(t, "agent-old"), nil)
	tunneltest.Serve(t, old, fakeRun("run-1", "web", 80, nil))
	if err := f.admin.Pods(fakeNS).Delete(bg, "agent-old", nil); err != nil {
		t.Fatal(err)
	}
	p := f.platform(t, f.agentPod(t, "agent-new"), nil)
	b := fakeRun("run-2", "web", 80, nil)
	if served, err := p.Serve(bg, b); err != nil || !served.TookOver {
		t.Fatalf("Serve over a gone holder's receipt: %+v, %v", served, err)
	}
	if r := f.receipt(t, "web"); r.Holder.Run != "run-2" || r.Pod != "agent-new" || !reflect.DeepEqual(r.Original.Selector, deployed.Spec.Selector) {
		t.Errorf("the new receipt: %+v", r)
	}
	tunneltest.Release(t, p, b)
	f.restored(t, "web", before, "after the run")
}

// A UDP port: a new name gets a Service port of protocol UDP; a deployed
// Service with TCP and UDP on one port number is taken over on its UDP
// port alone — the agent's slice carries the UDP port, the deployed pods'
// the TCP one — and Release restores it exactly.
func TestServeAUDPPortBesideATCPPortOfTheSameNumber(t *testing.T) {
	f := newFakeKube(t)
	f.deployWeb(t, 2)
	f.create(t, k8sapi.KindService, `{"metadata": {"name": "stats"},
		"spec": {"selector": {"app": "web"}, "ports": [{"name": "tcp", "protocol": "TCP", "port": 8125, "targetPort": 8080}, {"name": "udp", "protocol": "UDP", "port": 8125, "targetPort": 8125}]}}`)
	before := f.snapshot(t, "stats")
	p := f.platform(t, f.agentPod(t, "agent-a"), nil)

	fresh := fakeRun("run-1", "fresh", 8125, nil)
	fresh.UDP = true
	if _, err := p.Serve(bg, fresh); err != nil {
		t.Fatal(err)
	}
	want := []k8sapi.ServicePort{{Name: "udp-8125", Protocol: "UDP", Port: 8125, TargetPort: &k8sapi.IntOrString{Int: 8125}}}
	if svc := f.service(t, "fresh"); !reflect.DeepEqual(svc.Spec.Ports, want) {
		t.Errorf("the new Service's ports: %+v, want %+v", svc.Spec.Ports, want)
	}
	if s := f.slicesOf(t, "fresh")[ManagedBy]; len(s) != 1 || !reflect.DeepEqual(s[0].Ports, []k8sapi.EndpointPort{{Name: "udp-8125", Port: agentPort, Protocol: "UDP"}}) {
		t.Errorf("the new name's slice: %+v", s)
	}
	tunneltest.Release(t, p, fresh)

	b := fakeRun("run-1", "stats", 8125, nil)
	b.UDP = true
	served, err := p.Serve(bg, b)
	if err != nil || !served.TookOver || !strings.Contains(served.Detail, "8125/UDP") {
		t.Fatalf("Serve of stats:8125/udp: %+v, %v", served, err)
	}
	agent := f.slicesOf(t, "stats")[ManagedBy]
	byName := map[string]k8sapi.EndpointSlice{}
	for _, s := range agent {
		byName[s.Metadata.Name] = s
	}
	if got := byName["stats-plug"].Ports; !reflect.DeepEqual(got, []k8sapi.EndpointPort{{Name: "udp", Port: agentPort, Protocol: "UDP"}}) {
		t.Errorf("the agent's slice: %+v, want the UDP port alone", got)
	}
	if got := byName["stats-plug-pods"].Ports; !reflect.DeepEqual(got, []k8sapi.EndpointPort{{Name: "tcp", Port: 8080, Protocol: "TCP"}}) {
		t.Errorf("the deployed pods' slice: %+v, want the TCP port alone", got)
	}
	tunneltest.Release(t, p, b)
	f.restored(t, "stats", before, "after the run")

	tcpOnly := fakeRun("run-1", "web", 80, nil)
	tcpOnly.UDP = true
	if _, err := p.Serve(bg, tcpOnly); err == nil || !strings.Contains(err.Error(), "not on 80/UDP") {
		t.Errorf("serving a UDP port web does not have: %v", err)
	}
}
