package swarmplatform

import (
	"reflect"
	"strings"
	"testing"

	"plug/swarmapi"
	"plug/tunnel"
	"plug/tunnel/tunneltest"
)

// envImage is an image with an ENV of its own.
const envImage = "shop/web:2"

// A service's environment is its running container's: the image's ENV
// with the service's Env over it. With no task on the node, it is the
// service's Env over its image's ENV, read from the engine, and says so.
func TestEnvOfAService(t *testing.T) {
	f := newFakeSwarm(t)
	img := swarmapi.Image{RepoTags: []string{envImage}}
	img.Config.Env = []string{"PATH=/usr/bin:/bin", "FROM_IMAGE=baked", "SHARED=from-the-image"}
	f.AddImage(img)
	p := f.agent(t, "plug", nil)
	spec := func(name string, replicas uint64) swarmapi.ServiceSpec {
		return swarmapi.ServiceSpec{
			Name: name,
			TaskTemplate: swarmapi.TaskSpec{ContainerSpec: &swarmapi.ContainerSpec{
				Image: envImage, Args: []string{"serve", ":8080"},
				Env: []string{"SHARED=from-the-service", "DSN=postgres://db/shop?x=1", "MULTI=a\nb", "NOVALUE"},
			}},
			Mode: replicated(replicas),
		}
	}
	f.create(t, spec("web", 1))
	f.create(t, spec("parked", 0))
	want := map[string]string{
		"PATH": "/usr/bin:/bin", "FROM_IMAGE": "baked", "SHARED": "from-the-service",
		"DSN": "postgres://db/shop?x=1", "MULTI": "a\nb",
	}

	e, err := p.Env(bg, tunnel.EnvRequest{Kind: tunnel.WorkloadService, Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if got := tunneltest.EnvVars(e); !reflect.DeepEqual(got, want) {
		t.Errorf("web: %v, want %v", got, want)
	}
	if !strings.HasPrefix(e.Workload, "service/web: container web.1.") || len(e.Notes) != 0 {
		t.Errorf("web: %q, notes %v", e.Workload, e.Notes)
	}

	e, err = p.Env(bg, tunnel.EnvRequest{Kind: tunnel.WorkloadService, Name: "parked"})
	if err != nil {
		t.Fatal(err)
	}
	if got := tunneltest.EnvVars(e); !reflect.DeepEqual(got, want) {
		t.Errorf("parked: %v, want %v", got, want)
	}
	if !strings.Contains(e.Workload, "its service spec and image") {
		t.Errorf("parked: %q", e.Workload)
	}

	f.create(t, swarmapi.ServiceSpec{
		Name: "gone-image", Mode: replicated(0),
		TaskTemplate: swarmapi.TaskSpec{ContainerSpec: &swarmapi.ContainerSpec{Image: "nowhere:1", Env: []string{"A=1", "HOST={{.Node.Hostname}}"}}},
	})
	e, err = p.Env(bg, tunnel.EnvRequest{Kind: tunnel.WorkloadService, Name: "gone-image"})
	if err != nil {
		t.Fatal(err)
	}
	if got := tunneltest.EnvVars(e); !reflect.DeepEqual(got, map[string]string{"A": "1", "HOST": "{{.Node.Hostname}}"}) || len(e.Notes) != 2 ||
		!strings.Contains(e.Notes[0], "image nowhere:1 is not there") || !strings.Contains(e.Notes[1], "templates") {
		t.Errorf("gone-image: %v, notes %q", got, e.Notes)
	}

	for _, tc := range []struct {
		req  tunnel.EnvRequest
		want string
	}{
		{tunnel.EnvRequest{Kind: tunnel.WorkloadService, Name: "nope"}, "service/nope does not exist in this swarm"},
		{tunnel.EnvRequest{Kind: tunnel.WorkloadDeployment, Name: "web"}, "on Docker Swarm, name a service: --env-from service/web"},
		{tunnel.EnvRequest{Kind: tunnel.WorkloadService, Name: "web", Container: "app"}, "leave out :app"},
	} {
		if _, err := p.Env(bg, tc.req); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.req, err, tc.want)
		}
	}
}
