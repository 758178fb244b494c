package kubeplatform

import (
	"strings"
	"testing"

	"plug/k8sapi"
	"plug/tunnel"
)

func binding(name string, port, target int) tunnel.Binding {
	return tunnel.Binding{Name: name, Port: port, Target: target, Holder: tunnel.Holder{Run: "run-1", Developer: "SHA256:dev"}}
}

func TestServicesPlugCannotTakeOverAreRefusedSayingWhy(t *testing.T) {
	web := func(mod func(*k8sapi.Service)) *k8sapi.Service {
		s := &k8sapi.Service{Metadata: k8sapi.ObjectMeta{Name: "web"}, Spec: k8sapi.ServiceSpec{
			Type: "ClusterIP", ClusterIP: "198.18.16.20", Selector: map[string]string{"app": "web"},
			Ports: []k8sapi.ServicePort{{Name: "http", Port: 80, Protocol: "TCP"}, {Name: "dns", Port: 53, Protocol: "UDP"}},
		}}
		mod(s)
		return s
	}
	cases := []struct {
		svc  *k8sapi.Service
		port int
		want string
	}{
		{web(func(s *k8sapi.Service) { s.Spec.Type, s.Spec.ExternalName = "ExternalName", "db.example.org" }), 80, "ExternalName Service (an alias of db.example.org"},
		{web(func(s *k8sapi.Service) { s.Spec.ClusterIP = "None" }), 80, "headless Service"},
		{web(func(s *k8sapi.Service) { s.Spec.Selector = nil }), 80, "has no selector"},
		{web(func(*k8sapi.Service) {}), 8080, "answers on 80/TCP, 53/UDP, not on 8080/TCP; serve one of its TCP ports (e.g. -s web:80:LOCALPORT)"},
		{web(func(*k8sapi.Service) {}), 53, "not on 53/TCP"},
	}
	for _, tc := range cases {
		_, err := checkTakeover(tc.svc, binding("web", tc.port, 2000))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("port %d of %+v: got %v, want %q", tc.port, tc.svc.Spec, err, tc.want)
		}
	}
	sp, err := checkTakeover(web(func(*k8sapi.Service) {}), binding("web", 80, 2000))
	if err != nil || sp.Name != "http" {
		t.Errorf("port 80: got %+v, %v", sp, err)
	}
}

func TestReceiptServedPorts(t *testing.T) {
	tcp := func(port int) portKey { return portKey{Port: port} }
	udp443 := portKey{Port: 443, UDP: true}
	r := receipt{}.withServed(tcp(443), 2001).withServed(tcp(80), 2000).withServed(tcp(443), 2002).withServed(udp443, 2003)
	if got, ok := r.serving(tcp(443)); !ok || got != 2002 || len(r.Serves) != 3 || r.Serves[0].Port != 80 {
		t.Fatalf("serves %+v", r.Serves)
	}
	if got, ok := r.serving(udp443); !ok || got != 2003 || r.Serves[2] != (servedPort{Port: 443, Target: 2003, UDP: true}) {
		t.Fatalf("UDP 443 beside TCP 443: serves %+v", r.Serves)
	}
	if rest := r.without(tcp(80)); len(rest.Serves) != 2 || len(r.Serves) != 3 {
		t.Fatalf("without(80) = %+v and changed the original to %+v", rest.Serves, r.Serves)
	}
	if rest := r.without(udp443); len(rest.Serves) != 2 || rest.Serves[1] != (servedPort{Port: 443, Target: 2002}) {
		t.Fatalf("without(443/UDP) = %+v, want TCP 443 kept", rest.Serves)
	}
	if rest := r.without(portKey{}); len(rest.Serves) != 0 {
		t.Fatalf("without(0) = %+v, want nothing served", rest.Serves)
	}
}

func TestUnservedPortsGoToReadyPodsByTheirOwnPortNumbers(t *testing.T) {
	p := &Platform{ns: "ns"}
	svc := &k8sapi.Service{Metadata: k8sapi.ObjectMeta{Name: "web", UID: "u1"}}
	r := receipt{PodIP: "198.18.0.9", Serves: []servedPort{{Port: 80, Target: 40000}}, Original: &original{
		Selector: map[string]string{"app": "web"},
		Ports: []k8sapi.ServicePort{
			{Name: "http", Port: 80, TargetPort: &k8sapi.IntOrString{Int: 8080}},
			{Name: "admin", Port: 9000, TargetPort: &k8sapi.IntOrString{String: "admin"}},
		},
	}}
	pod := func(name, ip string, ready bool, adminPort int) k8sapi.Pod {
		status := "False"
		if ready {
			status = "True"
		}
		return k8sapi.Pod{
			Metadata: k8sapi.ObjectMeta{Name: name},
			Spec:     k8sapi.PodSpec{Containers: []k8sapi.Container{{Name: "c", Ports: []k8sapi.ContainerPort{{Name: "admin", ContainerPort: adminPort}}}}},
			Status:   k8sapi.PodStatus{PodIP: ip, Conditions: []k8sapi.PodCondition{{Type: "Ready", Status: status}}},
		}
	}
	got := p.podSlices(svc, r, []k8sapi.Pod{
		pod("web-b", "198.18.0.11", true, 9100),
		pod("web-a", "198.18.0.10", true, 9100),
		pod("web-c", "198.18.0.12", false, 9100), // not ready: left out
		pod("web-d", "198.18.0.13", true, 9200),  // numbers the port differently: own slice
	})
	if len(got) != 2 {
		t.Fatalf("got %d slices, want 2: %+v", len(got), got)
	}
	first, second := got[0], got[1]
	if first.Metadata.Name != "web-plug-pods" || second.Metadata.Name != "web-plug-pods-2" {
		t.Errorf("slice names %q, %q", first.Metadata.Name, second.Metadata.Name)
	}
	if len(first.Ports) != 1 || first.Ports[0] != (k8sapi.EndpointPort{Name: "admin", Port: 9100, Protocol: "TCP"}) {
		t.Errorf("first slice ports %+v, want only admin on 9100", first.Ports)
	}
	if len(first.Endpoints) != 2 || first.Endpoints[0].Addresses[0] != "198.18.0.10" || first.Endpoints[1].Addresses[0] != "198.18.0.11" {
		t.Errorf("first slice endpoints %+v, want web-a then web-b", first.Endpoints)
	}
	if len(second.Endpoints) != 1 || second.Ports[0].Port != 9200 {
		t.Errorf("second slice %+v, want web-d on 9200", second)
	}
	for _, s := range got {
		if s.Metadata.Labels[k8sapi.LabelServiceName] != "web" || s.Metadata.Labels[k8sapi.LabelSliceManagedBy] != ManagedBy || s.Metadata.OwnerReferences[0].UID != "u1" {
			t.Errorf("slice %s labels %v owners %v", s.Metadata.Name, s.Metadata.Labels, s.Metadata.OwnerReferences)
		}
	}
}

func TestEachRightComesWithTheCommandGrantingItAlone(t *testing.T) {
	rl := rule{group: "", resource: "secrets", name: "plug-state", verbs: []string{"get"}}
	want := `kubectl -n team-a patch role plug --type=json -p '[{"op":"add","path":"/rules/-","value":{"apiGroups":[""],"resourceNames":["plug-state"],"resources":["secrets"],"verbs":["get"]}}]'`
	if got := rl.fix("team-a", "get"); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got := (rule{group: "discovery.k8s.io", resource: "endpointslices"}).text("list"); got != "list endpointslices.discovery.k8s.io" {
		t.Errorf("rule text %q", got)
	}
}

func TestServicePatchesReplaceWholeFieldsOnly(t *testing.T) {
	svc := &k8sapi.Service{Metadata: k8sapi.ObjectMeta{ResourceVersion: "7", Annotations: map[string]string{
		"owner": "team-a", AnnotationReceipt: "{}", AnnotationHeartbeat: "t",
	}}}
	restore := setAnnotations(svc, nil, AnnotationReceipt, AnnotationHeartbeat)
	if got := restore.Value.(map[string]string); len(got) != 1 || got["owner"] != "team-a" {
		t.Errorf("restored annotations %v, want only owner", got)
	}
	if svc.Metadata.Annotations[AnnotationReceipt] == "" {
		t.Errorf("setAnnotations changed the Service it read")
	}
	bare := &k8sapi.Service{Metadata: k8sapi.ObjectMeta{Annotations: map[string]string{AnnotationReceipt: "{}"}}}
	if op := setAnnotations(bare, nil, AnnotationReceipt); op.Value.(map[string]string) != nil {
		t.Errorf("a Service left with no annotation gets %v, want none at all", op.Value)
	}
	for _, op := range []k8sapi.PatchOp{ifVersion(svc), setSelector(nil), restore} {
		if op.Op == "remove" || strings.Count(op.Path, "/") != 2 {
			t.Errorf("%+v may fail on a changed Service; only whole fields of /spec and /metadata are set", op)
		}
	}
}
