//go:build unix

package swarmplatform

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// Acceptance 5: the deployed agent gives a service's environment as its
// container has it, `docker exec … env` being the witness: the service's
// Env (a value with a newline, one replacing the image's) and the image's
// ENV, both; and with no task running, the same from the service's spec
// and its image. HOSTNAME and HOME are the runtime's, which a run keeps
// from the developer's machine (as it does PATH).
func TestDeployedAgentGivesAServicesEnvironment(t *testing.T) {
	s := needSwarm(t)
	image := agentImage(t)
	if out, err := exec.Command(s.docker, "image", "inspect", "--format", "{{json .Config.Env}}", s.workload).Output(); err != nil || !strings.Contains(string(out), "WORKLOAD_IMAGE_ENV=") {
		clustertest.Unavailable(t, fmt.Sprintf("the workload image %s has no ENV of its own (%s %v): testdata/swarm/up.sh loads the current one, or set PLUG_TEST_WORKLOAD_IMAGE", s.workload, out, err))
	}
	name := s.name("shop")
	spec := s.workloadSpec(name, "pause")
	spec.Mode = replicated(1)
	spec.TaskTemplate.ContainerSpec.Env = []string{"DSN=postgres://db/shop?sslmode=disable", "MULTI=line one\nline 'two'", "PATH=/from/the/service:/usr/bin:/bin", "EMPTY="}
	id := s.createService(t, spec, 1)
	addr, hostKey := s.deployAgent(t, image)

	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := ssh.NewSignerFromKey(priv)
	cfg := tunnel.ClientConfig{Addr: addr, User: "dev", Signer: signer, HostKey: hostKey}
	fetch := func() *tunnel.Env {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		e, err := tunnel.FetchEnv(ctx, cfg, tunnel.EnvRequest{Kind: tunnel.WorkloadService, Name: name})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	runtimeOnly := func(name string) bool { return name == "HOSTNAME" || name == "HOME" }
	got := tunneltest.EnvVars(fetch())
	tasks, err := s.c.Tasks(context.Background(), map[string][]string{"service": {id}, "desired-state": {"running"}})
	if err != nil || len(tasks) != 1 || tasks[0].Status.ContainerStatus == nil {
		t.Fatalf("the service's task: %v %+v", err, tasks)
	}
	out, err := exec.Command(s.docker, "exec", tasks[0].Status.ContainerStatus.ContainerID, "env", "-0").Output()
	if err != nil {
		t.Fatalf("docker exec env: %v", err)
	}
	want := map[string]string{}
	for _, kv := range strings.Split(string(out), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok && !runtimeOnly(k) {
			want[k] = v
		}
	}
	if !equalEnv(t, "the running service", got, want) {
		return
	}
	for k, v := range map[string]string{"WORKLOAD_IMAGE_ENV": "baked-into-the-image", "DSN": "postgres://db/shop?sslmode=disable", "MULTI": "line one\nline 'two'", "PATH": "/from/the/service:/usr/bin:/bin"} {
		if want[k] != v {
			t.Errorf("the container's %s = %q, want %q", k, want[k], v)
		}
	}

	if out, err := exec.Command(s.docker, "service", "scale", "-d", name+"=0").CombinedOutput(); err != nil {
		t.Fatalf("scaling %s to 0: %v\n%s", name, err, out)
	}
	s.waitTasks(t, id, 0)
	parked := fetch()
	equalEnv(t, "the service with no task", tunneltest.EnvVars(parked), want)
	if !strings.Contains(parked.Workload, "its service spec and image") {
		t.Errorf("the environment of a service with no task says it comes from %q", parked.Workload)
	}
}

// equalEnv reports each variable in which got differs from the container's.
func equalEnv(t *testing.T, what string, got, want map[string]string) bool {
	t.Helper()
	ok := true
	for k, v := range want {
		if g, has := got[k]; !has || g != v {
			t.Errorf("%s: %s = %q, the container has %q", what, k, g, v)
			ok = false
		}
	}
	for k, v := range got {
		if _, has := want[k]; !has {
			t.Errorf("%s: %s = %q, which the container has not", what, k, v)
			ok = false
		}
	}
	return ok
}
