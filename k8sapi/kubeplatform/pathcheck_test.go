package kubeplatform

import (
	"encoding/json"
	"testing"

	"plug/k8sapi"
)

// TestARouteIsTheSameForTheSameService: a Service read twice, as every
// event of the watch reads it anew, has one route, so that a heartbeat
// does not count as a change of the route; a change of what routes it
// does.
func TestARouteIsTheSameForTheSameService(t *testing.T) {
	const svc = `{"metadata":{"name":"web"},"spec":{"type":"ClusterIP","clusterIP":"198.18.16.10","selector":{"app":"web"},
		"ports":[{"name":"http","protocol":"TCP","port":80,"targetPort":8080},{"name":"admin","protocol":"TCP","port":81,"targetPort":"admin"}]}}`
	decode := func(text string) k8sapi.Service {
		var s k8sapi.Service
		if err := json.Unmarshal([]byte(text), &s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	first, again := routeOf(decode(svc)), routeOf(decode(svc))
	if first != again {
		t.Fatalf("the same Service read twice has two routes: %q and %q", first, again)
	}
	moved := decode(svc)
	moved.Spec.Ports[0].TargetPort = &k8sapi.IntOrString{Int: 9090}
	named := decode(svc)
	named.Spec.Ports[1].TargetPort = &k8sapi.IntOrString{String: "other"}
	for what, s := range map[string]k8sapi.Service{"a numbered target port": moved, "a named target port": named} {
		if routeOf(s) == first {
			t.Errorf("a change of %s left the route as it was: %q", what, first)
		}
	}
}
