// Package swarm checks the local Docker Swarm that up.sh starts: the paths
// plug relies on work on it. What cannot work on this kind of machine (VIP
// services, ingress-published ports) is described in README.md.
//
// Run with `go test ./...` in this directory after up.sh. Without the swarm
// the tests skip, or fail when CI=true.
package swarm

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

const (
	envFile  = "/run/plug-test/swarm.env"
	upScript = "testdata/swarm/up.sh"
	deadline = 60 * time.Second
)

// cluster is what up.sh wrote into swarm.env.
type cluster struct {
	cli, network, workload string
	env                    []string
}

// needSwarm reads swarm.env, or stops the test: it fails under CI=true and
// skips otherwise, saying how to start the swarm.
func needSwarm(t *testing.T) *cluster {
	t.Helper()
	path := envFile
	if d := os.Getenv("PLUG_TEST_ENV_DIR"); d != "" {
		path = d + "/swarm.env"
	}
	vars, err := readVars(path)
	if err == nil && vars["DOCKER"] == "" {
		err = fmt.Errorf("%s names no DOCKER", path)
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the local swarm is not up (%v); CI must run %s first", err, upScript)
		}
		t.Skipf("the local swarm is not up (%v); start it with %s", err, upScript)
	}
	return &cluster{
		cli:      vars["DOCKER"],
		network:  vars["SWARM_NETWORK"],
		workload: vars["WORKLOAD_IMAGE"],
		env:      append(os.Environ(), "DOCKER_HOST="+vars["DOCKER_HOST"]),
	}
}

// readVars reads the KEY=VALUE lines of an env file.
func readVars(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	vars := make(map[string]string)
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(k, "#") {
			vars[k] = v
		}
	}
	return vars, nil
}

// docker runs the CLI and returns its trimmed output; it fails t on error.
func (c *cluster) docker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := c.tryDocker(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tryDocker runs the CLI and returns its trimmed output, or an error with
// what it printed on standard error. (Not bound to t.Context(): cleanups run
// after that is canceled.)
func (c *cluster) tryDocker(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.cli, args...)
	cmd.Env = c.env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("docker %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return strings.TrimSpace(string(out)), nil
}

// service creates a service named name and removes it when the test ends,
// with its tasks' containers (those of finished jobs would stay).
func (c *cluster) service(t *testing.T, name string, args ...string) {
	t.Helper()
	create := []string{"service", "create", "--detach", "--quiet", "--no-resolve-image", "--name", name}
	c.docker(t, append(create, args...)...)
	t.Cleanup(func() {
		c.docker(t, "service", "rm", name)
		ids := c.docker(t, "ps", "--all", "--quiet", "--filter", "label=com.docker.swarm.service.name="+name)
		if ids != "" {
			c.docker(t, append([]string{"rm", "--force"}, strings.Fields(ids)...)...)
		}
	})
}

// tasks returns the state of each task of service svc, with its error.
func (c *cluster) tasks(t *testing.T, svc string) []string {
	ids := strings.Fields(c.docker(t, "service", "ps", "--quiet", "--no-trunc", svc))
	if len(ids) == 0 {
		return nil
	}
	args := append([]string{"inspect", "--format", "{{.Status.State}} {{.Status.Err}}"}, ids...)
	return strings.Split(c.docker(t, args...), "\n")
}

// waitTask polls until a task of svc is in one of the states, and fails t
// if one ends in another final state first.
func (c *cluster) waitTask(t *testing.T, svc string, states ...string) {
	t.Helper()
	final := map[string]bool{"complete": true, "failed": true, "rejected": true, "shutdown": true, "orphaned": true}
	stop := time.Now().Add(deadline)
	poll := time.NewTicker(200 * time.Millisecond)
	defer poll.Stop()
	for {
		for _, task := range c.tasks(t, svc) {
			state, _, _ := strings.Cut(task, " ")
			for _, s := range states {
				if state == s {
					return
				}
			}
			if final[state] {
				t.Fatalf("service %s: task ended %q before reaching %v; logs:\n%s", svc, task, states,
					c.docker(t, "service", "logs", "--raw", svc))
			}
		}
		if time.Now().After(stop) {
			t.Fatalf("service %s: no task reached %v within %v: %q", svc, states, deadline, c.tasks(t, svc))
		}
		<-poll.C
	}
}

// job runs `workload ARGS...` once as a dnsrr job on the test network and
// returns what it printed.
func (c *cluster) job(t *testing.T, name string, args ...string) string {
	t.Helper()
	c.service(t, name, append([]string{"--mode", "replicated-job", "--restart-condition", "none",
		"--endpoint-mode", "dnsrr", "--network", c.network, c.workload}, args...)...)
	c.waitTask(t, name, "complete")
	return c.docker(t, "service", "logs", "--raw", name)
}

// uniquePrefix starts the names of one test's services.
func uniquePrefix() string {
	b := make([]byte, 3)
	rand.Read(b)
	return "chk-" + hex.EncodeToString(b)
}

func TestDNSRRServiceReachesAnotherByNameAndAlias(t *testing.T) {
	c := needSwarm(t)
	p := uniquePrefix()
	server, alias := p+"-server", p+"-alias"
	c.service(t, server, "--endpoint-mode", "dnsrr",
		"--network", "name="+c.network+",alias="+alias, c.workload, "serve", "-name", server, ":8080")
	c.waitTask(t, server, "running")

	for _, name := range []string{server, alias} {
		got := c.job(t, p+"-by-"+strings.TrimPrefix(name, p+"-"), "get", "-n", "5", "http://"+name+":8080/")
		if want := strings.Repeat(server+"\n", 5); got+"\n" != want {
			t.Errorf("5 GETs of http://%s:8080/ printed %q, want %q", name, got, want)
		}
	}
}

// A port published in host mode is bound on the machine's loopback (up.sh
// makes docker_gwbridge bind there), which is how plug's agent is reached.
func TestHostModePublishIsReachableOnLoopback(t *testing.T) {
	c := needSwarm(t)
	svc := uniquePrefix() + "-published"
	c.service(t, svc, "--endpoint-mode", "dnsrr", "--network", c.network,
		"--publish", "mode=host,target=8080", c.workload, "serve", "-name", svc, ":8080")
	c.waitTask(t, svc, "running")
	task := c.docker(t, "service", "ps", "--quiet", "--no-trunc", "--filter", "desired-state=running", svc)
	port := c.docker(t, "inspect", "--format", "{{range .Status.PortStatus.Ports}}{{.PublishedPort}}{{end}}", task)

	resp, err := http.Get("http://127.0.0.1:" + port + "/")
	if err != nil {
		t.Fatalf("GET of the host-mode port %s on loopback: %v", port, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if string(body) != svc+"\n" {
		t.Fatalf("127.0.0.1:%s answered %q, want %q", port, body, svc+"\n")
	}
}

// The guard of up.sh rejects what a task sends towards the uplink: to the
// test ranges, and from them to anywhere (nothing is masqueraded). The
// connection fails at once with "no route to host", not after a timeout.
// The addresses are never routed: a test range and a documentation range.
func TestTasksCannotReachBeyondTheMachine(t *testing.T) {
	c := needSwarm(t)
	for _, addr := range []string{"198.18.255.1:9", "203.0.113.1:9"} {
		start := time.Now()
		_, err := c.tryDocker("run", "--rm", "--network", c.network, c.workload, "tcp", "-timeout", "10s", addr)
		if err == nil || !strings.Contains(err.Error(), "no route to host") {
			t.Errorf("a container dialing %s got %v, want it rejected with no route to host", addr, err)
		}
		t.Logf("a container dialing %s was rejected %v after docker run began", addr, time.Since(start).Round(time.Millisecond))
	}
}
