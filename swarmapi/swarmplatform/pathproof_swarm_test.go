//go:build unix

package swarmplatform

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/keys"
	"plug/swarmapi"
	"plug/tunnel"
	"plug/tunnel/clustertest"
)

// agentImage is plug's image for the tests that deploy the agent:
// PLUG_TEST_AGENT_IMAGE, or the one the test swarm loaded.
func agentImage(t *testing.T) string {
	if img := os.Getenv("PLUG_TEST_AGENT_IMAGE"); img != "" {
		return img
	}
	return clustertest.NeedSwarm(t).NeedPlugImage(t)
}

// deployAgent runs plug's agent as a swarm service the way
// deploy/plug-swarm.yml does (unprivileged, in the socket's group, on the
// test network, on a manager, its state in a volume, 30 s to stop),
// publishing its SSH port on this node, removes it and the member configs
// it kept at the test's end, and returns the address
// developers reach it at and its host key. flags are more flags of docker
// service create, e.g. --env=NAME=VALUE or --network=NET (which the agent
// joins too).
func (s *testSwarm) deployAgent(t *testing.T, image string, flags ...string) (string, ssh.PublicKey) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(s.c.Socket(), &st); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	name := s.name("agent")
	args := []string{"service", "create", "-d", "--quiet", "--no-resolve-image", "--name", name,
		"--user", fmt.Sprintf("65532:%d", st.Gid),
		"--env", "PLUG_PLATFORM=swarm", "--env", "PLUG_SWARM_TASK={{.Task.ID}}", "--env", "PLUG_ADDR=:2222",
		"--mount", "type=bind,source=" + s.c.Socket() + ",target=/var/run/docker.sock",
		"--mount", "type=volume,source=" + name + "-state,target=/var/lib/plug", "--stop-grace-period", "30s",
		"--network", s.network.Name, "--constraint", "node.role==manager",
		"--publish", fmt.Sprintf("mode=host,target=2222,published=%d", port)}
	args = append(args, flags...)
	out, err := exec.Command(s.docker, append(args, image, "agent")...).CombinedOutput()
	if err != nil {
		t.Fatalf("deploying the agent: %v\n%s", err, out)
	}
	t.Cleanup(func() { // the members and denials the agent kept
		cfgs, _ := s.c.Configs(context.Background(), map[string][]string{"label": {LabelService + "=" + name}})
		for _, c := range cfgs {
			s.c.RemoveConfig(context.Background(), c.ID)
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := exec.Command(s.docker, "service", "logs", "--raw", name).CombinedOutput()
			t.Logf("the agent's log:\n%s", logs)
		}
	})
	s.waitTasks(t, strings.TrimSpace(string(out)), 1)
	// The test engine publishes ports on loopback.
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	var key ssh.PublicKey
	clustertest.Eventually(t, 30*time.Second, "the agent's host key at "+addr, func() error {
		key, err = hostKeyAt(addr)
		return err
	})
	return addr, key
}

var errGotKey = errors.New("got the host key")

// hostKeyAt returns the host key the SSH server at addr presents.
func hostKeyAt(addr string) (ssh.PublicKey, error) {
	var key ssh.PublicKey
	_, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{
		User: "get", Timeout: 5 * time.Second,
		HostKeyCallback: func(_ string, _ net.Addr, k ssh.PublicKey) error { key = k; return errGotKey },
	})
	if key == nil {
		return nil, fmt.Errorf("no host key from %s: %v", addr, err)
	}
	return key, nil
}

// swarmTerminal is what a run's developer reads.
type swarmTerminal struct {
	mu sync.Mutex
	b  strings.Builder
}

func (term *swarmTerminal) event(e tunnel.Event) {
	term.mu.Lock()
	defer term.mu.Unlock()
	fmt.Fprintf(&term.b, "[%s] %s\n", e.Kind, e.Text)
}

func (term *swarmTerminal) String() string {
	term.mu.Lock()
	defer term.mu.Unlock()
	return term.b.String()
}

// countingServer is the developer's process: it answers GET / with body
// and counts the requests it sees.
func countingServer(t *testing.T, body string) (string, *atomic.Int32) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int32
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprintln(w, body)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String(), &hits
}

// With the agent deployed as a swarm service, a parked service of a stack
// is told to be one before anything goes wrong; the agent proves the
// name's path through the relay without its probes reaching the
// developer's process; scaled back up by hand, the service answers beside
// the run and the developer is told, within 30 s, that the name is
// answered by something else, once.
func TestDeployedAgentWarnsWhenAParkedServiceIsScaledBackUp(t *testing.T) {
	s := needSwarm(t)
	image := agentImage(t)
	ctx := context.Background()
	name := s.name("shop")
	s.removeRelays(t, name)
	spec := s.workloadSpec(name, "serve", "-name", "deployed", ":8080")
	spec.Labels[labelStack] = "shop"
	spec.Mode = replicated(1)
	s.createService(t, spec, 1)
	caller := s.caller(t)
	addr, hostKey := s.deployAgent(t, image)

	term := &swarmTerminal{}
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := ssh.NewSignerFromKey(priv)
	sess, err := tunnel.Connect(ctx, tunnel.ClientConfig{Addr: addr, User: "dev", Signer: signer, HostKey: hostKey,
		Run: tunnel.RunInfo{Serves: true}, Events: term.event})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	local, hits := countingServer(t, "local")
	served, err := sess.Serve(ctx, name, 8080, local)
	if err != nil || !served.TookOver {
		t.Fatalf("serving %s: %+v, %v", name, served, err)
	}
	if !strings.Contains(term.String(), "[warning] "+name+" belongs to the stack shop (label com.docker.stack.namespace: shop)") {
		t.Errorf("the developer was not told %s belongs to a stack:\n%s", name, term)
	}
	url := "http://" + name + ":8080/"
	s.answers(t, caller, url, "local", 5)
	before := hits.Load()
	// The burst of probes that follows serving goes out within 10 s.
	clustertest.Consistently(t, 12*time.Second, "the probes are invisible while the path is right", func() error {
		if now := hits.Load(); now != before {
			return fmt.Errorf("the developer's process saw %d requests nobody made: the probes reached it", now-before)
		}
		if strings.Contains(term.String(), name+" is answered by something else") || strings.Contains(term.String(), name+" is not reachable") {
			return fmt.Errorf("warned while the path was right:\n%s", term)
		}
		return nil
	})

	if out, err := exec.Command(s.docker, "service", "scale", "-d", name+"=1").CombinedOutput(); err != nil {
		t.Fatalf("scaling up by hand: %v %s", err, out)
	}
	scaled := time.Now()
	clustertest.Eventually(t, 30*time.Second, "the warning that "+name+" is answered by something else", func() error {
		if !strings.Contains(term.String(), "[warning] "+name+" is answered by something else") {
			return fmt.Errorf("the terminal shows:\n%s", term)
		}
		return nil
	})
	t.Logf("answered by something else: told %s after the scale-up; the terminal:\n%s", time.Since(scaled).Round(100*time.Millisecond), term)
	if !strings.Contains(term.String(), "the parked service runs again, changed by a deploy of its stack shop") {
		t.Errorf("the developer was not told the parked service runs again:\n%s", term)
	}
	clustertest.Consistently(t, 5*time.Second, "told once, and no request nobody made", func() error {
		if n := strings.Count(term.String(), name+" is answered by something else"); n != 1 {
			return fmt.Errorf("told %d times:\n%s", n, term)
		}
		if now := hits.Load(); now != before {
			return fmt.Errorf("the developer's process saw %d requests nobody made", now-before)
		}
		return nil
	})
}

// plug doctor from a developer's machine, against the agent deployed as a
// swarm service: the socket, the engine's version, a manager, the network
// joined, each on a line of its own, and nothing failing.
func TestDoctorOfTheDeployedSwarmAgent(t *testing.T) {
	s := needSwarm(t)
	image := agentImage(t)
	addr, hostKey := s.deployAgent(t, image)
	bin := filepath.Join(t.TempDir(), "plug")
	build := exec.Command("go", "build", "-o", bin, "plug")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building plug: %v\n%s", err, out)
	}
	home := t.TempDir()
	store := keys.Open(home)
	host, port, _ := net.SplitHostPort(addr)
	portNum, _ := strconv.Atoi(port)
	if err := store.AddProfile(keys.Profile{Name: "swarm", Host: host, Port: portNum, HostKey: keys.AuthorizedKey(hostKey), Platform: "swarm"}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := store.GenerateKey("swarm", "dev@test", false); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "doctor", "-p", "swarm")
	cmd.Env = append(os.Environ(), "PLUG_HOME="+home)
	out, err := cmd.CombinedOutput()
	t.Logf("plug doctor -p swarm:\n%s", out)
	if err != nil {
		t.Fatalf("plug doctor: %v", err)
	}
	engine, err := s.c.Engine(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"ok   agent at " + addr + " answers",
		" on Docker Swarm, network " + s.network.Name + ": serves runs",
		"ok   use the Docker socket /var/run/docker.sock: ",
		fmt.Sprintf("ok   Docker Engine API %s to %s (Docker %s speaks %s): ", swarmapi.MinAPIVersion, swarmapi.MaxAPIVersion, engine.Version, engine.APIVersion),
		"ok   run on a swarm manager: ",
		"ok   attached to the application's overlay network (" + s.network.Name + "): ",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("doctor's report lacks %q", want)
		}
	}
}
