package swarmapi

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"plug/tunnel"
)

// TestNamesTakePortsFromTheLabelTheSpecAndTheImage lists names from a fake
// engine: one service with the override label, one publishing a port whose
// image exposes two more (one UDP), one on another network, a new name's
// relay, a takeover's relay and the service it parked.
func TestNamesTakePortsFromTheLabelTheSpecAndTheImage(t *testing.T) {
	services := `[
	 {"ID":"1","Spec":{"Name":"stack_api","Labels":{"plug.dev/expose":"9000, 9001"},"TaskTemplate":{"ContainerSpec":{"Image":"api:1"},"Networks":[{"Target":"n1","Aliases":["api"]}]}}},
	 {"ID":"2","Spec":{"Name":"web","TaskTemplate":{"ContainerSpec":{"Image":"web:1@sha256:abc"},"Networks":[{"Target":"n1"}]},"EndpointSpec":{"Ports":[{"Protocol":"tcp","TargetPort":8080,"PublishedPort":30080}]}}},
	 {"ID":"3","Spec":{"Name":"elsewhere","TaskTemplate":{"ContainerSpec":{"Image":"x"},"Networks":[{"Target":"n2"}]}}},
	 {"ID":"4","Spec":{"Name":"db","Labels":{"plug.dev/relay":"db","plug.dev/ports":"5432:40001"},"TaskTemplate":{"Networks":[{"Target":"n1"}]}}},
	 {"ID":"5","Spec":{"Name":"plug-cache","Labels":{"plug.dev/relay":"cache","plug.dev/ports":"6379:40002"},"TaskTemplate":{"Networks":[{"Target":"n1","Aliases":["cache","stack_cache"]}]}}},
	 {"ID":"6","Spec":{"Name":"stack_cache","Labels":{"plug.dev/receipt":"{}"},"TaskTemplate":{"ContainerSpec":{"Image":"cache:1"},"Networks":[{"Target":"n1","Aliases":["cache"]}]}}}
	]`
	c := fakeEngine(t, "1.41", "1.12", func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/services"):
			io.WriteString(w, services)
		case strings.Contains(r.URL.Path, "/images/web:1@sha256:abc/json"):
			io.WriteString(w, `{"Config":{"ExposedPorts":{"8080/tcp":{},"8443/tcp":{},"53/udp":{}}}}`)
		default:
			engineError(w, 404, fmt.Sprintf("no such image: %s", r.URL.Path))
		}
	})
	p := NewPlatform(Config{Client: c, Networks: []NetworkRef{{ID: "n1", Name: "app"}}})
	names, err := p.Names(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []tunnel.ClusterName{
		{Name: "api", Aliases: []string{"stack_api"}, Ports: []int{9000, 9001}},
		{Name: "cache", Aliases: []string{"stack_cache"}, Ports: []int{6379}},
		{Name: "db", Ports: []int{5432}},
		{Name: "web", Ports: []int{8080, 8443}},
	}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("names\n got %+v\nwant %+v", names, want)
	}
}
