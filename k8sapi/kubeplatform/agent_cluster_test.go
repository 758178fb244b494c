package kubeplatform

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/tunnel"
	"plug/tunnel/clustertest"
)

// deployedAgent is the manifest's agent running in the test's namespace,
// reached from this machine (a developer's laptop) through a relay the
// test can cut, as a killed CLI or a lost network would.
type deployedAgent struct {
	k       *kube
	hostKey ssh.PublicKey
	relay   *relay
}

// deployAgent applies the manifest (under Pod Security restricted, as an
// OpenShift-like uid), changed by edits, and waits for the agent to be
// Ready.
func deployAgent(t *testing.T, k *kube, image string, edits ...func(string) string) *deployedAgent {
	t.Helper()
	deployManifest(t, k, image, 1000650000, edits...)
	k.Kubectl(t, "rollout", "status", "deployment/plug", "--timeout=120s")
	secret, err := k.admin.Secrets(k.Namespace).Get(bg, StateSecret)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(secret.Data[hostKeyField])
	if err != nil {
		t.Fatalf("the host key in %s: %v", StateSecret, err)
	}
	a := &deployedAgent{k: k, hostKey: signer.PublicKey()}
	a.relay = startRelay(t, func() string {
		_, ip := a.newestPod()
		return net.JoinHostPort(ip, "2222")
	})
	return a
}

// newestPod returns the name and address of the agent's newest pod.
func (a *deployedAgent) newestPod() (name, ip string) {
	out, _ := a.k.TryKubectl("get", "pod", "-l", "app.kubernetes.io/name=plug", "--sort-by=.metadata.creationTimestamp",
		"-o", "jsonpath={.items[-1:].metadata.name} {.items[-1:].status.podIP}")
	name, ip, _ = strings.Cut(strings.TrimSpace(out), " ")
	return name, ip
}

func (a *deployedAgent) pod(t *testing.T) string {
	name, _ := a.newestPod()
	if name == "" {
		t.Fatal("the agent has no pod")
	}
	return name
}

// connect opens a run on the agent, as `plug -s` does.
func (a *deployedAgent) connect(t *testing.T) *tunnel.Session {
	t.Helper()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := ssh.NewSignerFromKey(priv)
	s, err := tunnel.Connect(bg, tunnel.ClientConfig{
		Addr: a.relay.addr, User: "dev", Signer: signer, HostKey: a.hostKey,
		Run:    tunnel.RunInfo{Serves: true},
		Events: func(e tunnel.Event) { t.Logf("run: %s %s: %s", e.Kind, e.Name, e.Text) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// serveWeb serves web:80 from the test's local process and waits until
// pods reach it.
func (a *deployedAgent) serveWeb(t *testing.T, s *tunnel.Session) {
	t.Helper()
	served, err := s.Serve(bg, "web", 80, net.JoinHostPort(a.k.NodeIP, fmt.Sprint(a.k.local.port)))
	if err != nil {
		t.Fatal(err)
	}
	if !served.TookOver {
		t.Errorf("serving web: %+v, want a takeover", served)
	}
	a.k.eventuallyAnswered(t, "http://web/", "local")
}

// Acceptance 4 and 6, with the agent deployed by the manifest in a
// namespace enforcing Pod Security restricted, as an OpenShift-like uid:
// the deployed web is given back on Ctrl-C at once, after the CLI is
// killed once the agent's grace is over (within 90 s), on a rollout restart
// by the stopping agent (a run still connected follows to the new agent
// instead), by the agent itself at boot after its container was killed,
// and after the agent pod is force-deleted. Each time the Service equals
// what it was.
func TestDeployedAgentGivesBackOnEveryEnding(t *testing.T) {
	k := &kube{Kube: clustertest.NeedKube(t, clustertest.Restricted())}
	image := agentImage(t, k.Kube)
	k.setupClients(t)
	k.deployWeb(t, 2)
	before := k.snapshot(t, "web")
	a := deployAgent(t, k, image)
	restored := func(what string, within time.Duration) {
		t.Helper()
		start := time.Now()
		clustertest.Eventually(t, within, what+": web restored", func() error { return k.snapshot(t, "web").sameAs(before) })
		t.Logf("%s: web restored %v after the test's last step", what, time.Since(start).Round(time.Millisecond))
		k.eventuallyAnswered(t, "http://web/", "deployed")
		// The Service is restored before plug's slices go: they send the
		// callers to the deployed pods until the controller's slices do.
		clustertest.Eventually(t, clustertest.Settle, what+": plug's slices gone", func() error {
			if s := k.slicesOf(t, "web")[ManagedBy]; len(s) != 0 {
				return fmt.Errorf("plug's slices are left: %v", s)
			}
			return nil
		})
	}

	t.Run("Ctrl-C", func(t *testing.T) {
		s := a.connect(t)
		a.serveWeb(t, s)
		s.Close()
		restored("Ctrl-C", clustertest.Settle)
	})

	t.Run("CLI killed", func(t *testing.T) {
		s := a.connect(t)
		a.serveWeb(t, s)
		killed := time.Now()
		a.relay.cut(true) // the laptop's plug is gone: no goodbye, no reconnect
		defer a.relay.cut(false)
		restored("kill -9 of the CLI", 90*time.Second)
		t.Logf("restored %v after the CLI was killed", time.Since(killed).Round(time.Second))
	})

	t.Run("rollout restart, the run goes on", func(t *testing.T) {
		s := a.connect(t)
		a.serveWeb(t, s)
		old := a.pod(t)
		k.Kubectl(t, "rollout", "restart", "deployment/plug")
		k.Kubectl(t, "rollout", "status", "deployment/plug", "--timeout=120s")
		clustertest.Eventually(t, 60*time.Second, "the run reconnected to the new agent, which holds web", func() error {
			svc, err := k.admin.Services(k.Namespace).Get(bg, "web")
			if err != nil {
				return err
			}
			r, _, err := receiptOf(svc)
			if err != nil || r.Pod == "" || r.Pod == old {
				return fmt.Errorf("receipt %+v (%v)", r, err)
			}
			return nil
		})
		k.eventuallyAnswered(t, "http://web/", "local")
		s.Close()
		restored("Ctrl-C after the rollout", clustertest.Settle)
	})

	t.Run("rollout restart, the CLI gone", func(t *testing.T) {
		s := a.connect(t)
		a.serveWeb(t, s)
		a.relay.cut(true) // the run cannot follow to the new agent
		defer a.relay.cut(false)
		k.Kubectl(t, "rollout", "restart", "deployment/plug")
		// The stopping agent gives it back, not the new agent's sweep: the
		// new agent's log, read below, says which.
		restored("rollout restart", clustertest.Settle)
		k.Kubectl(t, "rollout", "status", "deployment/plug", "--timeout=120s")
		if logs := k.Kubectl(t, "logs", a.pod(t)); strings.Contains(logs, "giving web back") {
			t.Errorf("the new agent's sweep gave web back; the stopping agent should have:\n%s", logs)
		}
	})

	t.Run("agent killed, its container restarts", func(t *testing.T) {
		s := a.connect(t)
		a.serveWeb(t, s)
		a.relay.cut(true)
		defer a.relay.cut(false)
		pod := a.pod(t)
		id := strings.TrimPrefix(k.Kubectl(t, "get", "pod", pod, "-o", "jsonpath={.status.containerStatuses[0].containerID}"), "containerd://")
		killContainer(t, id) // a crash or an OOM kill: no SIGTERM, nothing given back
		restored("agent container killed", 60*time.Second)
		clustertest.Eventually(t, 60*time.Second, "the restarted agent says why it gave web back", func() error {
			logs, err := k.TryKubectl("logs", pod)
			if !strings.Contains(logs, "it names this agent pod "+pod+", which has just started") {
				return fmt.Errorf("log %q (%v)", logs, err)
			}
			return nil
		})
	})

	t.Run("agent pod force-deleted", func(t *testing.T) {
		s := a.connect(t)
		a.serveWeb(t, s)
		a.relay.cut(true)
		defer a.relay.cut(false)
		old := a.pod(t)
		k.Kubectl(t, "delete", "pod", old, "--grace-period=0", "--force")
		restored("agent pod force-deleted", 90*time.Second)
		k.Kubectl(t, "rollout", "status", "deployment/plug", "--timeout=120s")
		t.Logf("new agent's log:\n%s", k.Kubectl(t, "logs", a.pod(t)))
	})
}

// killContainer kills with SIGKILL every process of the container id
// running on this machine (the test cluster's node).
func killContainer(t *testing.T, id string) {
	t.Helper()
	if id == "" {
		t.Fatal("no container id")
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	killed := 0
	for _, f := range procs {
		cg, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(cg), id) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
		if p, err := os.FindProcess(pid); err == nil && p.Kill() == nil {
			killed++
		}
	}
	if killed == 0 {
		t.Fatalf("found no process of container %s on this machine", id)
	}
}

// relay forwards TCP connections to the agent; cut makes it drop every
// connection and refuse new ones, as a dead laptop or network would.
type relay struct {
	addr   string
	target func() string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]bool
}

func startRelay(t *testing.T, target func() string) *relay {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{addr: l.Addr().String(), target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { l.Close(); r.cut(true) })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go r.pass(c)
		}
	}()
	return r
}

func (r *relay) pass(c net.Conn) {
	defer c.Close()
	r.mu.Lock()
	down := r.down
	r.mu.Unlock()
	if down {
		return
	}
	// The target is found (kubectl, on a machine maybe busy) before the
	// dial's own deadline starts.
	target := r.target()
	ctx, cancel := context.WithTimeout(bg, clustertest.Settle)
	up, err := (&net.Dialer{}).DialContext(ctx, "tcp", target)
	cancel()
	if err != nil {
		return
	}
	defer up.Close()
	r.mu.Lock()
	if r.down {
		r.mu.Unlock()
		return
	}
	r.conns[c], r.conns[up] = true, true
	r.mu.Unlock()
	go func() {
		io.Copy(up, c)
		up.Close() // the laptop closed its end (a killed plug): so does the relay
	}()
	io.Copy(c, up)
}

func (r *relay) cut(down bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down = down
	if down {
		for c := range r.conns {
			c.Close()
		}
		clear(r.conns)
	}
}
