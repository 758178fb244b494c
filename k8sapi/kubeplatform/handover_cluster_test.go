package kubeplatform

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"plug/k8sapi"
	"plug/tunnel"
	"plug/tunnel/clustertest"
)

// The acceptance of make before break, on the real cluster with the
// manifest's agent: a caller pod calls web every 50 ms on new connections
// and on one kept alive (testdata/workload call), while web changes hands
// every way it can. Each phase runs PLUG_TEST_REPS times (default 1) and
// reports what the callers saw.

// repetitions is how often each phase runs: PLUG_TEST_REPS, default 1.
func repetitions(t *testing.T) int {
	n, err := strconv.Atoi(os.Getenv("PLUG_TEST_REPS"))
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// startCaller starts a pod running `workload call` on url and waits until
// it runs.
func (k *kube) startCaller(t *testing.T, url string) clustertest.Caller {
	t.Helper()
	k.Apply(t, k.workloadPod("caller", "call", "-every", "50ms", "-timeout", "2s", url))
	k.Kubectl(t, "wait", "--for=condition=Ready", "--timeout=90s", "pod/caller")
	return clustertest.Caller{Log: func(since time.Time) (string, error) {
		return k.TryKubectl("logs", "caller", "--since-time="+since.UTC().Format(time.RFC3339))
	}}
}

// laterProcess is the developer's CMD, which plug starts after it serves
// the name: a port chosen now, answered (GET / with name) from start on.
type laterProcess struct {
	addr string
	srv  *http.Server
}

func newLaterProcess(t *testing.T, ip, name string) *laterProcess {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return &laterProcess{addr: addr, srv: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, name)
	})}}
}

func (lp *laterProcess) start(t *testing.T) {
	t.Helper()
	l, err := net.Listen("tcp", lp.addr)
	if err != nil {
		t.Fatal(err)
	}
	go lp.srv.Serve(l)
	t.Cleanup(func() { lp.srv.Close() })
}

// Acceptance 1–3 of make before break: no caller on a new connection sees
// an error when web changes hands, whichever way it does, and the callers
// kept alive keep working; and during a dropped run's grace the callers
// reach the deployed pods, and the run again once it re-attaches. A
// request the developer's machine was answering when its connection was
// cut (plug killed, the network gone) dies with it: those are counted
// apart, as sent before the cut.
func TestCallersSeeNoErrorWhenNamesChangeHands(t *testing.T) {
	k := &kube{Kube: clustertest.NeedKube(t, clustertest.Restricted())}
	image := agentImage(t, k.Kube)
	k.setupClients(t)
	k.deployWeb(t, 2)
	before := k.snapshot(t, "web")
	a := deployAgent(t, k, image)
	c := k.startCaller(t, "http://web/")
	c.Await(t, "deployed", time.Now(), time.Minute)
	reps := repetitions(t)

	restored := func(t *testing.T, within time.Duration) {
		t.Helper()
		clustertest.Eventually(t, within, "web restored", func() error { return k.snapshot(t, "web").sameAs(before) })
		clustertest.Eventually(t, clustertest.Settle, "plug's slices gone", func() error {
			if s := k.slicesOf(t, "web")[ManagedBy]; len(s) != 0 {
				return fmt.Errorf("plug's slices are left: %d", len(s))
			}
			return nil
		})
	}
	// takeOver serves web from a process that starts only once web is
	// served (as plug starts CMD), and waits until the callers reach it.
	takeOver := func(t *testing.T, who string) (*tunnel.Session, time.Time) {
		t.Helper()
		s := a.connect(t)
		lp := newLaterProcess(t, k.NodeIP, who)
		start := time.Now()
		if _, err := s.Serve(bg, "web", 80, lp.addr); err != nil {
			t.Fatal(err)
		}
		lp.start(t)
		c.Await(t, who, start, 30*time.Second)
		return s, start
	}
	report := func(t *testing.T, phase string, ty clustertest.Tally) {
		t.Helper()
		t.Logf("%s, %d times: %s", phase, reps, ty)
		if ty.NewFailed > 0 || ty.KeepFailed > 0 {
			t.Errorf("%s: callers saw %d errors on new connections and %d on the kept-alive one: %s", phase, ty.NewFailed, ty.KeepFailed, strings.Join(ty.Failures, "; "))
		}
	}

	t.Run("takeover, then Ctrl-C", func(t *testing.T) {
		var sum clustertest.Tally
		for i := range reps {
			who := fmt.Sprintf("local-%d", i)
			run, start := takeOver(t, who)
			run.Close()
			back := time.Now()
			c.Await(t, "deployed", back, 30*time.Second)
			restored(t, 30*time.Second)
			ty := c.Count(t, start)
			if ty.Answers[who] == 0 || ty.Answers["deployed"] == 0 {
				t.Errorf("repetition %d: answers %v, want the run's and then the deployed pods'", i, ty.Answers)
			}
			sum.Add(ty)
		}
		report(t, "takeover, then Ctrl-C", sum)
	})

	t.Run("kill -9, grace, give-back by the agent", func(t *testing.T) {
		var sum, inFlight clustertest.Tally
		for i := range reps {
			who := fmt.Sprintf("killed-%d", i)
			run, start := takeOver(t, who)
			killed := time.Now()
			a.relay.cut(true) // plug is killed: no goodbye, no reconnect
			c.Await(t, "deployed", killed, clustertest.Settle)
			if _, has, _ := receiptOf(mustService(t, k, "web")); !has {
				t.Errorf("repetition %d: web was given back at once; the run's grace should keep it", i)
			}
			restored(t, 2*time.Minute)
			t.Logf("repetition %d: given back %v after the kill", i, time.Since(killed).Round(time.Second))
			run.Close() // the killed plug never comes back
			a.relay.cut(false)
			// What the killed plug was answering dies with it: requests
			// sent before the kill that fail were in flight at it.
			calls, end := c.Settled(t, start)
			inFlight.Add(clustertest.TallyCalls(calls, start, killed))
			ty := clustertest.TallyCalls(calls, killed, end)
			if ty.Answers["deployed"] == 0 {
				t.Errorf("repetition %d: no caller reached the deployed pods during the grace: %v", i, ty.Answers)
			}
			sum.Add(ty)
		}
		t.Logf("sent before the kill (the killed plug answered them): %s", inFlight)
		report(t, "kill -9, grace, give-back", sum)
	})

	t.Run("dropped, re-attached within the grace", func(t *testing.T) {
		var sum, inFlight clustertest.Tally
		for i := range reps {
			who := fmt.Sprintf("back-%d", i)
			run, start := takeOver(t, who)
			dropped := time.Now()
			a.relay.cut(true)
			c.Await(t, "deployed", time.Now(), clustertest.Settle)
			a.relay.cut(false) // the laptop is back: the session reconnects
			c.Await(t, who, time.Now(), 30*time.Second)
			run.Close()
			c.Await(t, "deployed", time.Now(), 30*time.Second)
			restored(t, 30*time.Second)
			calls, end := c.Settled(t, start)
			inFlight.Add(clustertest.TallyCalls(calls, start, dropped))
			sum.Add(clustertest.TallyCalls(calls, dropped, end))
		}
		t.Logf("sent before the drop (the dropped connection carried them): %s", inFlight)
		report(t, "dropped and re-attached", sum)
	})

	t.Run("rollout restart of the agent, the run follows", func(t *testing.T) {
		var sum clustertest.Tally
		for i := range reps {
			who := fmt.Sprintf("moved-%d", i)
			run, start := takeOver(t, who)
			old := a.pod(t)
			oldLog := k.followLog(t, old)
			restart := time.Now()
			k.Kubectl(t, "rollout", "restart", "deployment/plug")
			k.Kubectl(t, "rollout", "status", "deployment/plug", "--timeout=180s")
			clustertest.Eventually(t, 90*time.Second, "the old agent pod is gone", func() error {
				if out, _ := k.TryKubectl("get", "pod", old, "-o", "name"); strings.TrimSpace(out) != "" {
					return fmt.Errorf("%s is still there", old)
				}
				return nil
			})
			if r, _, _ := receiptOf(mustService(t, k, "web")); r.Pod == old || r.Pod == "" {
				t.Errorf("repetition %d: web is held by %q after the rollout, want the new agent", i, r.Pod)
			}
			during := c.Count(t, restart)
			if during.Answers["deployed"] > 0 || len(during.Failures) > 0 {
				newLog, _ := k.TryKubectl("logs", "--timestamps", a.pod(t))
				t.Logf("repetition %d: during the rollout %d callers reached the deployed pods, %d failed %v; the old agent's log:\n%s\nthe new agent's:\n%s",
					i, during.Answers["deployed"], len(during.Failures), during.Failures, oldLog, newLog)
			}
			run.Close()
			c.Await(t, "deployed", time.Now(), 30*time.Second)
			restored(t, 30*time.Second)
			sum.Add(c.Count(t, start))
		}
		report(t, "rollout restart, the run follows", sum)
	})

	t.Run("rollout restart of the agent, the CLI gone", func(t *testing.T) {
		var sum, inFlight clustertest.Tally
		for i := range reps {
			who := fmt.Sprintf("stranded-%d", i)
			run, start := takeOver(t, who)
			dropped := time.Now()
			a.relay.cut(true)
			c.Await(t, "deployed", time.Now(), clustertest.Settle)
			k.Kubectl(t, "rollout", "restart", "deployment/plug")
			restored(t, 90*time.Second)
			k.Kubectl(t, "rollout", "status", "deployment/plug", "--timeout=180s")
			run.Close()
			a.relay.cut(false)
			calls, end := c.Settled(t, start)
			inFlight.Add(clustertest.TallyCalls(calls, start, dropped))
			sum.Add(clustertest.TallyCalls(calls, dropped, end))
		}
		t.Logf("sent before the CLI was killed (its connection carried them): %s", inFlight)
		report(t, "rollout restart, the CLI gone", sum)
	})
}

func mustService(t *testing.T, k *kube, name string) *k8sapi.Service {
	t.Helper()
	svc, err := k.admin.Services(k.Namespace).Get(bg, name)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// podLog is what a pod logged, followed from the start until the test ends.
type podLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *podLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// followLog follows pod's log, with timestamps: a pod that is deleted
// meanwhile keeps what it said.
func (k *kube) followLog(t *testing.T, pod string) *podLog {
	t.Helper()
	l := &podLog{}
	cmd := exec.Command(k.KubectlBin, "--kubeconfig", k.Kubeconfig, "--namespace", k.Namespace, "logs", "-f", "--timestamps", pod)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			l.mu.Lock()
			l.lines = append(l.lines, sc.Text())
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cmd.Process.Kill(); <-done; cmd.Wait() })
	return l
}
