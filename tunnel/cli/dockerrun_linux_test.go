package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"plug/tunnel"
	"plug/tunnel/clustertest"
)

// localEngine makes the test Swarm's engine the local Docker engine of plug
// --dockerrun (DOCKER_HOST, and its docker CLI first on PATH), and returns
// the workload image loaded in it.
func localEngine(t *testing.T) *clustertest.Swarm {
	t.Helper()
	s := clustertest.NeedSwarm(t)
	bin := t.TempDir()
	if err := os.Symlink(s.DockerBin, filepath.Join(bin, "docker")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("DOCKER_HOST", s.Host)
	return s
}

// containersOf lists the containers, running or not, of plug's runs.
func containersOf(t *testing.T, s *clustertest.Swarm) string {
	t.Helper()
	return strings.TrimSpace(s.Docker(t, "ps", "-a", "--filter", "label=plug.run", "--format", "{{.Names}}"))
}

// A --dockerrun container reaches a cluster name as a plain run does, and
// its exit code is plug's.
func TestDockerrunContainerCallsTheClusterByName(t *testing.T) {
	s := localEngine(t)
	store := useHome(t)
	c := newCluster(t, store, "shop")
	c.platform.SetNames(k8sName("web", "shop", 18080))
	c.workload(t, "web:18080", "hello from web")

	code, stdout, stderr := runPlug(t, "-p", "shop", "-c", "--dockerrun", "--", s.WorkloadImage, "get", "http://web.shop:18080/")
	if code != 0 || stdout != "hello from web\n" {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	code, _, stderr = runPlug(t, "-p", "shop", "-c", "--dockerrun", "--", s.WorkloadImage, "get", "-timeout", "2s", "http://web:18081/")
	if code != 1 {
		t.Errorf("a container that failed (exit 1): plug exits %d\n%s", code, stderr)
	}
	if left := containersOf(t, s); left != "" {
		t.Errorf("containers left behind: %s", left)
	}
}

// A --dockerrun container serves a name the cluster calls; the agent
// shows the run as a dockerrun; Ctrl-C stops and removes the container.
func TestDockerrunContainerServesANameUntilCtrlC(t *testing.T) {
	s := localEngine(t)
	store := useHome(t)
	c := newCluster(t, store, "shop")
	servedByContainer(t, s, "shop", c.platform.DialContext, func() {
		recs, err := c.platform.Runs(context.Background())
		if err != nil || len(recs) != 1 || recs[0].Container != tunnel.ContainerDockerrun {
			t.Errorf("the agent's record of the run: %+v, %v; want one, a dockerrun", recs, err)
		}
	})
}

// On the real cluster, through an agent on the Kubernetes platform: a
// --dockerrun container reaches the namespace's Service web by name, and
// the cluster's callers of api:8080 reach the container.
func TestDockerrunOnTheCluster(t *testing.T) {
	k := needKubeRun(t)
	s := localEngine(t)
	t.Setenv("PLUG_HOME", k.home)
	code, stdout, stderr := runPlug(t, "-p", "kube", "-c", "--dockerrun", "--", s.WorkloadImage, "get", "http://web:18080/")
	if code != 0 || stdout != "hello from the cluster\n" {
		t.Fatalf("a container calling web:18080: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	servedByContainer(t, s, "kube", k.dial, func() {})
}

// servedByContainer runs a container of the workload image serving
// api:8080 in profile's cluster through --dockerrun, checks that dial (as
// the cluster's callers) reaches it, calls during while it runs, then types
// Ctrl-C and checks that plug ends and the container is gone.
func servedByContainer(t *testing.T, s *clustertest.Swarm, profile string, dial func(ctx context.Context, network, address string) (net.Conn, error), during func()) {
	t.Helper()
	port := strconv.Itoa(freeLoopbackPort(t))
	type result struct {
		code   int
		stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, _, stderr := runPlug(t, "-p", profile, "-s", "api:8080:"+port, "--dockerrun", "--",
			s.WorkloadImage, "serve", "-name", "from the container", "127.0.0.1:"+port)
		done <- result{code, stderr}
	}()
	clustertest.Eventually(t, 60*time.Second, "the cluster's api:8080 to reach the container", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := dial(ctx, "tcp", "api:8080")
		if err != nil {
			return err
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(conn, "GET / HTTP/1.0\r\n\r\n")
		body, _ := io.ReadAll(conn)
		if !strings.HasSuffix(string(body), "\nfrom the container\n") {
			return &answerError{string(body)}
		}
		return nil
	})
	during()
	if left := containersOf(t, s); !strings.HasPrefix(left, "plug-") {
		t.Errorf("the running container: %q", left)
	}

	syscall.Kill(os.Getpid(), syscall.SIGINT) // Ctrl-C
	select {
	case r := <-done:
		if r.code == 0 || !strings.Contains(r.stderr, "api:8080") {
			t.Errorf("plug after Ctrl-C: exit %d\n%s", r.code, r.stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("plug did not end within 30 s of Ctrl-C")
	}
	// docker run --rm has dockerd remove the container once it stopped,
	// and plug's docker rm -f may meet that removal in progress: dockerd
	// finishes it in its own time.
	clustertest.Eventually(t, clustertest.Settle, "no container left behind after Ctrl-C", func() error {
		if left := containersOf(t, s); left != "" {
			return fmt.Errorf("containers: %s", left)
		}
		return nil
	})
}

// answerError is an answer that is not the one expected.
type answerError struct{ body string }

func (e *answerError) Error() string { return "answered " + e.body }
