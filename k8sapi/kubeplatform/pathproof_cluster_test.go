package kubeplatform

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/keys"
	"plug/tunnel"
	"plug/tunnel/clustertest"
)

// terminal is what a run's developer reads: the events its session
// receives.
type terminal struct {
	t  *testing.T
	mu sync.Mutex
	b  strings.Builder
}

func (term *terminal) event(e tunnel.Event) {
	term.t.Logf("run: %s %s: %s", e.Kind, e.Name, e.Text)
	term.mu.Lock()
	defer term.mu.Unlock()
	fmt.Fprintf(&term.b, "[%s] %s\n", e.Kind, e.Text)
}

func (term *terminal) String() string {
	term.mu.Lock()
	defer term.mu.Unlock()
	return term.b.String()
}

// waitFor waits up to within for the terminal to show text, and returns
// how long that took.
func (term *terminal) waitFor(t *testing.T, within time.Duration, text string) time.Duration {
	t.Helper()
	start := time.Now()
	clustertest.Eventually(t, within, "the terminal shows "+text, func() error {
		if !strings.Contains(term.String(), text) {
			return fmt.Errorf("it shows:\n%s", term)
		}
		return nil
	})
	return time.Since(start)
}

// openRun opens a run on the deployed agent whose events go to a terminal.
func (a *deployedAgent) openRun(t *testing.T) (*tunnel.Session, *terminal) {
	t.Helper()
	term := &terminal{t: t}
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := ssh.NewSignerFromKey(priv)
	s, err := tunnel.Connect(bg, tunnel.ClientConfig{
		Addr: a.relay.addr, User: "dev", Signer: signer, HostKey: a.hostKey,
		Run: tunnel.RunInfo{Serves: true}, Events: term.event,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, term
}

// revert puts web's selector back, as a CD controller does.
func (k *kube) revert(t *testing.T) time.Time {
	k.Kubectl(t, "patch", "service", "web", "--type=json", "-p", `[{"op":"add","path":"/spec/selector","value":{"app":"web"}}]`)
	return time.Now()
}

// Acceptance 1, 2 and 4 with the manifest's agent: web, managed by Argo
// CD, is taken over; the developer is told who manages it before anything
// goes wrong. The agent proves the path from its pod through the Service,
// and its probes never reach the developer's process. Changed back with
// the deployed workload running, the terminal names Argo CD with the
// snippet for this Service, and says web is answered by something else;
// with no workload, that web is not reachable inside the cluster. Each
// once; how long each took is logged (the probes' schedule, the endpoints
// and kube-proxy decide it).
func TestDeployedAgentProvesThePathAndWarns(t *testing.T) {
	k := &kube{Kube: clustertest.NeedKube(t)}
	image := agentImage(t, k.Kube)
	k.setupClients(t)
	k.deployWeb(t, 1)
	k.Kubectl(t, "annotate", "service", "web", "argocd.argoproj.io/tracking-id=shop:/Service:"+k.Namespace+"/web")
	a := deployAgent(t, k, image)
	snippet := "      name: web\n      namespace: " + k.Namespace + "\n"

	t.Run("workload running", func(t *testing.T) {
		s, term := a.openRun(t)
		a.serveWeb(t, s)
		if !strings.Contains(term.String(), "[warning] web is managed by Argo CD (annotation argocd.argoproj.io/tracking-id: shop:/Service:"+k.Namespace+"/web)") ||
			!strings.Contains(term.String(), snippet) {
			t.Errorf("before the takeover, the developer was not told Argo CD manages web, with the remedy:\n%s", term)
		}
		clustertest.Eventually(t, 30*time.Second, "the agent proved web's path", func() error {
			if logs, _ := k.TryKubectl("logs", a.pod(t)); !strings.Contains(logs, "web: path proven") {
				return fmt.Errorf("the agent's log:\n%s", logs)
			}
			return nil
		})
		hits := k.local.hits.Load()
		// A change of web's endpoints (its unserved port follows the
		// deployed pods) proves the path again, a burst of probes.
		k.Kubectl(t, "scale", "deployment/web", "--replicas=2")
		k.Kubectl(t, "rollout", "status", "deployment/web", "--timeout=90s")
		// The burst's probes go out within 10 s of the change.
		clustertest.Consistently(t, 12*time.Second, "the probes are invisible while the path is right", func() error {
			if now := k.local.hits.Load(); now != hits {
				return fmt.Errorf("the developer's process saw %d requests nobody made: the probes reached it", now-hits)
			}
			if strings.Contains(term.String(), "is not reachable") || strings.Contains(term.String(), "answered by something else") {
				return fmt.Errorf("warned while the path was right:\n%s", term)
			}
			return nil
		})

		reverted := k.revert(t)
		took := term.waitFor(t, clustertest.Settle, "[warning] web was changed back by Argo CD (annotation argocd.argoproj.io/tracking-id: shop:/Service:"+k.Namespace+"/web)")
		if !strings.Contains(term.String()[strings.Index(term.String(), "changed back"):], snippet) {
			t.Errorf("the revert's warning lacks the snippet for web in %s:\n%s", k.Namespace, term)
		}
		t.Logf("named Argo CD %s after the revert", took.Round(100*time.Millisecond))
		term.waitFor(t, clustertest.Settle, "[warning] web is answered by something else")
		t.Logf("answered by something else: told %s after the revert", time.Since(reverted).Round(100*time.Millisecond))

		k.Kubectl(t, "scale", "deployment/web", "--replicas=0")
		scaled := time.Now()
		term.waitFor(t, clustertest.Settle, "[warning] web is not reachable inside the cluster")
		t.Logf("not reachable: told %s after the workload was scaled to 0", time.Since(scaled).Round(100*time.Millisecond))
		clustertest.Consistently(t, 5*time.Second, "each warning told once", func() error {
			for _, w := range []string{"changed back", "answered by something else", "not reachable inside the cluster"} {
				if n := strings.Count(term.String(), w); n != 1 {
					return fmt.Errorf("%q told %d times:\n%s", w, n, term)
				}
			}
			return nil
		})
		if now := k.local.hits.Load(); now != hits {
			t.Errorf("the developer's process saw %d requests after the revert", now-hits)
		}
		s.Close()
		clustertest.Eventually(t, clustertest.Settle, "web given back", func() error {
			svc, err := k.admin.Services(k.Namespace).Get(bg, "web")
			if err != nil || svc.Metadata.Annotations[AnnotationReceipt] != "" {
				return fmt.Errorf("annotations %v (%v)", svc.Metadata.Annotations, err)
			}
			return nil
		})
	})

	t.Run("no workload", func(t *testing.T) {
		s, term := a.openRun(t)
		a.serveWeb(t, s)
		reverted := k.revert(t)
		term.waitFor(t, clustertest.Settle, "[warning] web was changed back by Argo CD")
		term.waitFor(t, clustertest.Settle, "[warning] web is not reachable inside the cluster: the agent's connection to web:80 ")
		t.Logf("not reachable: told %s after the revert", time.Since(reverted).Round(100*time.Millisecond))
		if strings.Contains(term.String(), "answered by something else") {
			t.Errorf("with no workload, told web is answered by something else:\n%s", term)
		}

		// The controller's revert is undone by hand: the path heals.
		k.Kubectl(t, "patch", "service", "web", "--type=json", "-p", `[{"op":"add","path":"/spec/selector","value":null}]`)
		term.waitFor(t, clustertest.Settle, "[healed] web reaches this run again")
		k.eventuallyAnswered(t, "http://web/", "local")
	})
}

// hostPort splits the relay's address for a profile.
func hostPort(t *testing.T, addr string) (string, string) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return host, port
}

// buildPlug builds this tree's plug CLI for the tests that run it.
func buildPlug(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "plug")
	cmd := exec.Command("go", "build", "-o", bin, "plug")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building plug: %v\n%s", err, out)
	}
	return bin
}

// Acceptance 5: with a Role lacking patch on services, the manifest's
// agent does not start serving and its log names the rule; plug doctor
// prints the patch that grants it; that line, run as printed, lets the
// agent serve and doctor come back clean, with no restart. Issue 12,
// acceptance 9: meanwhile its pod reads NotReady (its readiness probe says
// why), and the plug Service still reaches it; once the right is granted
// the pod is Ready.
func TestDeployedAgentWithoutARightAndDoctor(t *testing.T) {
	k := &kube{Kube: clustertest.NeedKube(t)}
	image := agentImage(t, k.Kube)
	k.setupClients(t)
	k.deployWeb(t, 1)
	plug := buildPlug(t)
	a := deployAgent(t, k, image)
	k.Kubectl(t, "patch", "role", "plug", "--type=json", "-p", `[{"op":"replace","path":"/rules/0/verbs","value":["get","list","watch","create","delete"]}]`)
	old := a.pod(t)
	k.Kubectl(t, "delete", "pod", old, "--wait=true")
	clustertest.Eventually(t, 60*time.Second, "the agent's new pod runs", func() error {
		if name, ip := a.newestPod(); name == old || ip == "" {
			return fmt.Errorf("the newest agent pod is %s at %q", name, ip)
		}
		return nil
	})

	clustertest.Eventually(t, 30*time.Second, "the agent's log names the missing rule", func() error {
		logs, _ := k.TryKubectl("logs", a.pod(t))
		if !strings.Contains(logs, "missing right patch services (for -s: create a name, take over a deployed Service and restore it, sweep receipts), which runs need; grant it with: kubectl -n "+k.Namespace+" patch role plug") ||
			!strings.Contains(logs, "not serving runs") {
			return fmt.Errorf("the agent's log:\n%s", logs)
		}
		return nil
	})
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := ssh.NewSignerFromKey(priv)
	if _, err := tunnel.Connect(bg, tunnel.ClientConfig{Addr: a.relay.addr, User: "dev", Signer: signer, HostKey: a.hostKey}); err == nil ||
		!strings.Contains(err.Error(), "patch services") {
		t.Errorf("a run on the agent lacking patch services: %v", err)
	}

	home := t.TempDir()
	store := keys.Open(home)
	host, port := hostPort(t, a.relay.addr)
	portNum, _ := strconv.Atoi(port)
	if err := store.AddProfile(keys.Profile{Name: "kube", Host: host, Port: portNum, HostKey: keys.AuthorizedKey(a.hostKey), Platform: "kubernetes"}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := store.GenerateKey("kube", "dev@test", false); err != nil {
		t.Fatal(err)
	}
	doctor := func() (int, string) {
		cmd := exec.Command(plug, "doctor", "-p", "kube")
		cmd.Env = append(os.Environ(), "PLUG_HOME="+home)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		t.Logf("plug doctor -p kube: exit %d\n%s", code, out)
		return code, string(out)
	}
	code, out := doctor()
	if code != 1 || !strings.Contains(out, "FAIL missing right patch services, which runs need") {
		t.Fatalf("doctor: exit %d", code)
	}
	pod, ip := a.newestPod()
	clustertest.Eventually(t, 30*time.Second, "the readiness probe says the agent serves no runs", func() error {
		events, _ := k.TryKubectl("get", "events", "--field-selector", "involvedObject.name="+pod+",reason=Unhealthy", "-o", "jsonpath={.items[*].message}")
		if !strings.Contains(events, "Readiness probe failed") || !strings.Contains(events, "not serving runs") {
			return fmt.Errorf("the pod's Unhealthy events: %q", events)
		}
		return nil
	})
	if ready := k.Kubectl(t, "get", "pod", pod, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`); ready != "False" {
		t.Errorf("the agent that refuses runs reads Ready %q", ready)
	}
	if eps := k.Kubectl(t, "get", "endpointslices", "-l", "kubernetes.io/service-name=plug", "-o", "jsonpath={.items[*].endpoints[*].addresses[*]}"); !strings.Contains(eps, ip) {
		t.Errorf("the plug Service does not reach the agent that is not Ready (%s): its endpoints are %q", ip, eps)
	}
	var fix string
	for _, line := range strings.Split(out, "\n") {
		if l := strings.TrimSpace(line); strings.HasPrefix(l, "kubectl -n "+k.Namespace+" patch role plug") {
			if fix != "" {
				t.Fatalf("doctor prints more than one patch:\n%s", out)
			}
			fix = l
		}
	}
	if fix == "" {
		t.Fatal("doctor prints no kubectl patch")
	}
	// Run it the way an admin pastes it into a shell, kubectl on PATH.
	cmd := exec.Command("sh", "-c", fix)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+k.Kubeconfig, "PATH="+filepath.Dir(k.KubectlBin)+":"+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", fix, err, out)
	}
	if code, out := doctor(); code != 0 || strings.Contains(out, "FAIL") || strings.Contains(out, "warn") {
		t.Fatalf("after the patch, doctor: exit %d", code)
	}
	clustertest.Eventually(t, 30*time.Second, "the agent's pod Ready once it serves runs", func() error {
		if ready := k.Kubectl(t, "get", "pod", pod, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`); ready != "True" {
			return fmt.Errorf("Ready is %q", ready)
		}
		return nil
	})
	s, _ := a.openRun(t)
	a.serveWeb(t, s)
	if logs := k.Kubectl(t, "logs", a.pod(t)); !strings.Contains(logs, "every right runs need is granted: serving runs") {
		t.Errorf("the agent does not say it serves runs now:\n%s", logs)
	}
}
