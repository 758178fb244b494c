package kubeplatform

import (
	"reflect"
	"testing"

	"plug/k8sapi"
	"plug/tunnel"
)

func TestClusterDomain(t *testing.T) {
	for conf, want := range map[string]string{
		"search shop.svc.cluster.local svc.cluster.local cluster.local\nnameserver 198.18.16.10\noptions ndots:5\n": "cluster.local",
		"nameserver 10.0.0.10\nsearch shop.svc.corp.example. svc.corp.example. corp.example.\n":                     "corp.example",
		"":                     "cluster.local",
		"search example.com\n": "cluster.local",
	} {
		if got := clusterDomain(conf); got != want {
			t.Errorf("clusterDomain(%q) = %q, want %q", conf, got, want)
		}
	}
}

func TestServiceNames(t *testing.T) {
	svc := func(name string, ports ...k8sapi.ServicePort) k8sapi.Service {
		return k8sapi.Service{Metadata: k8sapi.ObjectMeta{Name: name}, Spec: k8sapi.ServiceSpec{Ports: ports}}
	}
	services := map[string]k8sapi.Service{
		"web":  svc("web", k8sapi.ServicePort{Port: 8080}, k8sapi.ServicePort{Port: 80, Protocol: "TCP"}, k8sapi.ServicePort{Port: 80, Protocol: "UDP"}),
		"dns":  svc("dns", k8sapi.ServicePort{Port: 53, Protocol: "UDP"}),
		"none": svc("none"),
		"api":  svc("api", k8sapi.ServicePort{Port: 9000}),
	}
	got := serviceNames(services, "shop", "cluster.local")
	want := []tunnel.ClusterName{
		{Name: "api", Aliases: []string{"api.shop", "api.shop.svc", "api.shop.svc.cluster.local"}, Ports: []int{9000}},
		{Name: "web", Aliases: []string{"web.shop", "web.shop.svc", "web.shop.svc.cluster.local"}, Ports: []int{80, 8080}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("serviceNames = %+v\nwant %+v", got, want)
	}
	if got := serviceNames(nil, "shop", "cluster.local"); got == nil || len(got) != 0 {
		t.Fatalf("no services: %#v, want an empty, non-nil list", got)
	}
}
