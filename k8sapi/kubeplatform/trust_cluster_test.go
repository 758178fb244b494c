package kubeplatform

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// Issue 12, acceptance 1, on the real cluster: a second key sending the
// first run's id to another agent replica can neither serve nor extend,
// move or give back the first run's name, nor end the first run through
// the records of runs; the Service is not changed, the first run's Lease
// is not marked, the first run keeps answering and is told nothing.
func TestAnotherKeyCannotTakeARunByItsID(t *testing.T) {
	k := needKube(t)
	k.deployWeb(t, 1)
	fast := func(o *Options) { o.Heartbeat, o.SweepEvery = time.Second, 2*time.Second }
	first := k.platform(t, k.agentPod(t, "agent-a"), nil, fast)
	second := k.platform(t, k.agentPod(t, "agent-b"), nil, fast)
	tunneltest.Maintain(t, first)
	tunneltest.Maintain(t, second)

	var mu sync.Mutex
	var told []string
	alice := k.run("run-shared", "web", 80)
	alice.Holder.User, alice.Holder.Developer = "alice", "SHA256:alice"
	alice.Notify = func(e tunnel.Event) {
		mu.Lock()
		defer mu.Unlock()
		told = append(told, string(e.Kind)+": "+e.Text)
	}
	if _, err := first.Serve(bg, alice); err != nil {
		t.Fatal(err)
	}
	k.eventuallyAnswered(t, "http://web/", "local")
	before := k.snapshot(t, "web")

	for _, port := range []int{80, 9090} { // move the run's port here; extend it to another
		thief := k.run("run-shared", "web", port)
		thief.Holder.User, thief.Holder.Developer = "mallory", "SHA256:mallory"
		_, err := second.Serve(bg, thief)
		var held *tunnel.HeldError
		if !errors.As(err, &held) || held.Holder.Developer != "SHA256:alice" {
			t.Fatalf("another key serving web:%d with the first run's id: %v, want a HeldError naming alice", port, err)
		}
		if !strings.Contains(err.Error(), "alice (key SHA256:alice) since") || strings.Contains(err.Error(), "run-shared") {
			t.Errorf("the refusal %q does not name the holder, or tells the run id", err)
		}
		if err := second.Release(bg, thief); err != nil {
			t.Errorf("releasing web:%d for another key: %v", port, err)
		}
	}
	thief := k.run("run-shared", "web", 0)
	thief.Holder.Developer = "SHA256:mallory"
	if err := second.Release(bg, thief); err != nil {
		t.Errorf("releasing every port of web for another key: %v", err)
	}
	// The first replica's own heartbeat (every second here) may renew the
	// receipt's time meanwhile; nothing else of the Service may change.
	if err := k.snapshot(t, "web").butHeartbeat().sameAs(before.butHeartbeat()); err != nil {
		t.Errorf("the other key changed the Service: %v", err)
	}
	k.eventuallyAnswered(t, "http://web/", "local")
	clustertest.Eventually(t, 30*time.Second, "a sweep and a heartbeat of both replicas", func() error {
		if after := k.snapshot(t, "web"); after.version == before.version {
			return errors.New("the heartbeat was not renewed yet")
		}
		return nil
	})
	if h := first.holdingOf("web"); h == nil || !h.owner.SameRun(alice.Holder) {
		t.Errorf("the first replica no longer holds web for alice: %+v", h)
	}
	if h := second.holdingOf("web"); h != nil {
		t.Errorf("the second replica holds web: %+v", h)
	}
	k.eventuallyAnswered(t, "http://web/", "local")

	// The records of runs (Leases): a record of the other key bearing the
	// first run's id, on the second replica, as a squat that raced in
	// would leave. Ending the run of that id for the other key marks its
	// own Lease only; the first run's Lease is not marked, and the first
	// replica's watch is told nothing of it.
	podA, podB := first.pod, second.pod
	aliceRec := tunnel.RunRecord{Run: "run-shared", Agent: podA, User: "alice", Key: "SHA256:alice", Since: time.Now().UTC()}
	malloryRec := tunnel.RunRecord{Run: "run-shared", Agent: podB, User: "mallory", Key: "SHA256:mallory", Since: time.Now().UTC()}
	if err := first.PutRun(bg, aliceRec); err != nil {
		t.Fatal(err)
	}
	if err := second.PutRun(bg, malloryRec); err != nil {
		t.Fatal(err)
	}
	watched := make(chan tunnel.RunRecord, 4)
	watchCtx, stopWatch := context.WithCancel(bg)
	defer stopWatch()
	go first.WatchEnded(watchCtx, podA, func(rec tunnel.RunRecord, _ tunnel.RunEnd) { watched <- rec })
	go second.WatchEnded(watchCtx, podB, func(rec tunnel.RunRecord, _ tunnel.RunEnd) { watched <- rec })
	n, err := second.EndRun(bg, "run-shared", "SHA256:mallory", tunnel.RunEnd{By: "mallory (SHA256:mallory)", Reason: "mine now", At: time.Now().UTC()})
	if err != nil || n != 1 {
		t.Errorf("ending run-shared of mallory's key: %d marked, %v; want her one Lease", n, err)
	}
	select {
	case rec := <-watched:
		if rec.Key != "SHA256:mallory" || rec.Agent != podB {
			t.Errorf("a watch was told of %+v ended, want mallory's record on %s", rec, podB)
		}
	case <-time.After(30 * time.Second):
		t.Error("the second replica's watch was not told of mallory's record ended")
	}
	l, err := k.admin.Leases(k.Namespace).Get(bg, leaseName(podA, "run-shared"))
	if err != nil {
		t.Fatal(err)
	}
	if end, marked := l.Metadata.Annotations[AnnotationRunEnded]; marked {
		t.Errorf("the first run's Lease was marked ended by the other key's end: %s", end)
	}
	select {
	case rec := <-watched:
		t.Errorf("a watch was told of %+v ended too", rec)
	default:
	}
	first.DeleteRun(bg, podA, "run-shared")
	second.DeleteRun(bg, podB, "run-shared")

	mu.Lock()
	defer mu.Unlock()
	for _, e := range told {
		if strings.HasPrefix(e, string(tunnel.EventEnded)) {
			t.Errorf("the first run was told: %s", e)
		}
	}
}

// httpThrough sends GET / on a connection the run opened through the agent
// and returns the answer.
func httpThrough(c net.Conn) (string, error) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.0\r\nHost: test\r\n\r\n"); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// Issue 12, acceptances 2 and 6, with the manifest's agent: -s of plug's
// own Service and of a Service the admin protects is refused and changes
// neither; a run dials the cluster's names and nothing else by default,
// and with PLUG_DIAL widened to every address, still not the loopback, the
// cloud's metadata address, the node, the API server or the agent itself,
// each refusal naming its rule.
func TestDeployedAgentNeverServesItsOwnAndDialsWithinItsPolicy(t *testing.T) {
	k := &kube{Kube: clustertest.NeedKube(t)}
	image := agentImage(t, k.Kube)
	k.setupClients(t)
	k.deployWeb(t, 1)
	k.Apply(t, `
apiVersion: v1
kind: Service
metadata:
  name: payments
  annotations: {plug.dev/protect: "true"}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
`)
	a := deployAgent(t, k, image)
	plugBefore, paymentsBefore := k.snapshot(t, "plug"), k.snapshot(t, "payments")
	s := a.connect(t)
	local := net.JoinHostPort(k.NodeIP, fmt.Sprint(k.local.port))
	for _, tc := range []struct {
		name string
		port int
		want string
	}{
		{"plug", 2222, "plug's own Service"},
		{"payments", 80, `protected by the cluster admin (annotation plug.dev/protect: "true")`},
	} {
		_, err := s.Serve(bg, tc.name, tc.port, local)
		var refused *tunnel.ServeError
		if !errors.As(err, &refused) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("-s %s:%d: %v, want a refusal saying %q", tc.name, tc.port, err, tc.want)
		}
	}
	for name, before := range map[string]snapshot{"plug": plugBefore, "payments": paymentsBefore} {
		if after := k.snapshot(t, name); after.version != before.version {
			t.Errorf("the refused -s changed the Service %s: %v", name, after.sameAs(before))
		}
	}

	_, podIP := a.newestPod()
	apiIP := strings.TrimSpace(k.Kubectl(t, "-n", "default", "get", "service", "kubernetes", "-o", "jsonpath={.spec.clusterIP}"))
	webPod := strings.TrimSpace(k.Kubectl(t, "get", "pod", "-l", "app=web", "-o", "jsonpath={.items[0].status.podIP}"))
	type dial struct{ addr, rule string }
	refused := func(s *tunnel.Session, cases []dial) {
		t.Helper()
		for _, tc := range cases {
			c, err := s.Dial(bg, tc.addr)
			if err == nil {
				c.Close()
				t.Errorf("dialling %s went through, want the rule %q", tc.addr, tc.rule)
				continue
			}
			if !strings.Contains(err.Error(), "dial policy refuses") || !strings.Contains(err.Error(), "(rule: "+tc.rule+")") {
				t.Errorf("dialling %s: %v, want the rule %q", tc.addr, err, tc.rule)
			}
		}
	}
	answers := func(s *tunnel.Session, addrs ...string) {
		t.Helper()
		for _, addr := range addrs {
			c, err := s.Dial(bg, addr)
			if err == nil {
				var answer string
				answer, err = httpThrough(c)
				if err == nil && !strings.Contains(answer, "deployed") {
					err = fmt.Errorf("answered %q", answer)
				}
			}
			if err != nil {
				t.Errorf("dialling %s: %v", addr, err)
			}
		}
	}
	refused(s, []dial{
		{"127.0.0.1:2222", "cluster names"}, {net.JoinHostPort(podIP, "2222"), "cluster names"},
		{"169.254.169.254:80", "cluster names"}, {net.JoinHostPort(k.NodeIP, "10250"), "cluster names"},
		{net.JoinHostPort(apiIP, "443"), "cluster names"}, {"kubernetes.default:443", "cluster names"},
		{"plug:2222", "cluster names"}, {net.JoinHostPort(webPod, "8080"), "cluster names"},
		{"web:8080", "cluster names and their ports"},
	})
	answers(s, "web:80", "web."+k.Namespace+".svc.cluster.local:80")
	s.Close()

	k.Kubectl(t, "set", "env", "deployment/plug", "PLUG_DIAL=0.0.0.0/0")
	k.Kubectl(t, "rollout", "status", "deployment/plug", "--timeout=120s")
	_, podIP = a.newestPod()
	wide := a.connect(t)
	refused(wide, []dial{
		{"127.0.0.1:2222", "loopback"}, {net.JoinHostPort(podIP, "2222"), "protected"},
		{"169.254.169.254:80", "link-local"}, {net.JoinHostPort(k.NodeIP, "10250"), "protected"},
		{net.JoinHostPort(k.NodeIP, "6443"), "protected"}, {net.JoinHostPort(apiIP, "443"), "protected"},
		{"kubernetes.default.svc.cluster.local:443", "protected"}, {"plug:2222", "protected"},
	})
	answers(wide, "web:80", net.JoinHostPort(webPod, "8080"))
}
