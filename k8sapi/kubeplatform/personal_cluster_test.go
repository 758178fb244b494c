package kubeplatform

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// The acceptance tests of personal takeovers (plug -s --header) on the
// real cluster: the manifest's agent takes the Service shop over for two
// developers at once, each with a header of their own; the caller is this
// machine, reaching shop's ClusterIP through kube-proxy as any pod does.
// The deployed pods run testdata/workload's serve (HTTP/1.1 and h2c, its
// gRPC-framed echo, "NAME not HTTP" to other bytes), answering with their
// pod's name.

// deployShop deploys replicas pods of the workload answering with their
// names on 8080, and the Service shop (port 80) in front of them.
func (k *kube) deployShop(t *testing.T, replicas int) {
	t.Helper()
	k.Apply(t, k.servingDeployment("shop", replicas, `serve, ":8080"`, `{name: http, containerPort: 8080}`)+`
---
apiVersion: v1
kind: Service
metadata: {name: shop}
spec:
  selector: {app: shop}
  ports: [{name: http, port: 80, targetPort: http}]
`)
	k.Kubectl(t, "rollout", "status", "deployment/shop", "--timeout=90s")
}

// shopPods are the names of shop's pods that are Ready and not being
// deleted.
func (k *kube) shopPods(t *testing.T) map[string]bool {
	out := k.Kubectl(t, "get", "pod", "-l", "app=shop", "-o",
		`jsonpath={range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status} {.metadata.deletionTimestamp}{"\n"}{end}`)
	pods := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[1] == "True" {
			pods[f[0]] = true
		}
	}
	return pods
}

// caller is an HTTP client of address from this machine.
func caller(address string, h2 bool) *http.Client {
	var d net.Dialer
	return tunneltest.HTTPClient(func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", address) }, h2)
}

// ask GETs / with X-Dev: dev (none when dev is "") and returns the answer.
func ask(c *http.Client, dev string) (string, error) {
	return tunneltest.Ask(c, "http://shop/", "X-Dev", dev)
}

// grpcCall makes a call of messages to shop over c (HTTP/2) with X-Dev:
// dev; see tunneltest.GRPCCall.
func grpcCall(c *http.Client, dev string, messages ...string) ([]string, string, error) {
	return tunneltest.GRPCCall(c, "http://shop/test.Echo/Call", "X-Dev", dev, messages...)
}

// connectAs opens a run on the agent as user, with a key of its own.
func (a *deployedAgent) connectAs(t *testing.T, user string) *tunnel.Session {
	t.Helper()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := ssh.NewSignerFromKey(priv)
	s, err := tunnel.Connect(bg, tunnel.ClientConfig{
		Addr: a.relay.addr, User: user, Signer: signer, HostKey: a.hostKey,
		Run:    tunnel.RunInfo{Serves: true},
		Events: func(e tunnel.Event) { t.Logf("%s: %s %s: %s", user, e.Kind, e.Name, e.Text) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func xDev(dev string) tunnel.Filter {
	return tunnel.Filter{Headers: []tunnel.HeaderMatch{{Name: "X-Dev", Value: dev}}}
}

// Acceptance 1 to 5 of personal takeovers, on the manifest's agent: two
// developers and a caller without the header each get the right answer,
// 100/100, over a kept-alive HTTP/1.1 connection and over one h2c
// connection; gRPC-framed unary and streaming calls go both ways; bytes
// that are not HTTP reach the deployed pods, a malformed or huge header is
// answered 400/431 and the agent goes on; scaling the deployed pods 2 → 3
// → 2 during the takeover, the other requests reach every ready pod and
// none that is gone; an overlapping filter and a full takeover are
// refused; one developer's Ctrl-C leaves the other's filter working, and
// the last one out restores the Service exactly.
func TestPersonalTakeoversOnTheDeployedAgent(t *testing.T) {
	k := &kube{Kube: clustertest.NeedKube(t, clustertest.Restricted())}
	image := agentImage(t, k.Kube)
	k.setupClients(t)
	k.deployShop(t, 2)
	specBefore := k.Kubectl(t, "get", "service", "shop", "-o", "jsonpath={.spec}")
	before := k.snapshot(t, "shop")
	clusterIP := strings.TrimSpace(k.Kubectl(t, "get", "service", "shop", "-o", "jsonpath={.spec.clusterIP}"))
	address := net.JoinHostPort(clusterIP, "80")
	clustertest.Eventually(t, 30*time.Second, "shop answers at its ClusterIP", func() error {
		_, err := ask(caller(address, false), "")
		return err
	})
	if _, err := ask(caller(address, true), ""); err != nil {
		clustertest.Unavailable(t, fmt.Sprintf("the workload image %s does not answer h2c (%v): testdata/cluster/up.sh loads the current one, or set PLUG_TEST_WORKLOAD_IMAGE", k.WorkloadImage, err))
	}
	a := deployAgent(t, k, image)

	devs := map[string]*tunnel.Session{}
	for _, dev := range []string{"alice", "bob"} {
		s := a.connectAs(t, dev)
		served, err := s.ServeFiltered(bg, "shop", 80, tunneltest.DevServer(t, dev), xDev(dev))
		if err != nil || !served.TookOver {
			t.Fatalf("%s: a personal takeover of shop: %+v, %v", dev, served, err)
		}
		t.Logf("%s: %s", dev, served.Detail)
		devs[dev] = s
	}
	carol := a.connectAs(t, "carol")
	if _, err := carol.ServeFiltered(bg, "shop", 80, tunneltest.DevServer(t, "carol"), tunnel.Filter{Headers: []tunnel.HeaderMatch{{Name: "X-Dev", Regex: "b.*"}}}); err == nil || !strings.Contains(err.Error(), "overlaps the personal takeover of bob") {
		t.Errorf("carol's X-Dev~b.*: %v, want refused as overlapping bob's", err)
	}
	if _, err := carol.Serve(bg, "shop", 80, tunneltest.DevServer(t, "carol")); err == nil || !strings.Contains(err.Error(), "taken over personally") {
		t.Errorf("carol's full takeover: %v, want refused while personal ones exist", err)
	}

	// kube-proxy picks an endpoint for each new connection, and follows
	// the Service's change within a second or so: until then a connection
	// may still reach a deployed pod. 20 new connections in a row that
	// reach alice say it has followed (2 deployed pods beside the agent
	// would answer 20 in a row with odds under one in 3 billion).
	clustertest.Eventually(t, 30*time.Second, "alice's requests reach alice, 20 new connections in a row", func() error {
		for i := range 20 {
			got, err := ask(caller(address, false), "alice") // a new connection each time
			if err == nil && got != "alice HTTP/1.1" {
				err = fmt.Errorf("connection %d answered %q", i, got)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	h1, h2 := caller(address, false), caller(address, true)
	pods := k.shopPods(t)
	for _, c := range []struct {
		client *http.Client
		proto  string
	}{{h1, "HTTP/1.1"}, {h2, "HTTP/2.0"}} {
		seen := map[string]int{}
		for i := range 100 {
			for _, dev := range []string{"alice", "bob", ""} {
				got, err := ask(c.client, dev)
				want := dev + " " + c.proto
				if dev == "" {
					want = "a deployed pod"
					if pods[got] {
						want = got
					}
				}
				if err != nil || got != want {
					t.Fatalf("%s request %d with X-Dev %q: %q, %v; want %s", c.proto, i, dev, got, err, want)
				}
				seen[got]++
			}
		}
		t.Logf("%s: %v", c.proto, seen)
	}

	// An HTTP/1.1 request upgraded to h2c is answered over HTTP/2, routed
	// by its header.
	for _, dev := range []string{"alice", "mallory"} {
		c, err := net.DialTimeout("tcp", address, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tunneltest.H2CUpgrade(c, "X-Dev", dev)
		if got = strings.TrimSpace(got); err != nil || (dev == "alice") != (got == "alice HTTP/2.0") || (dev != "alice" && !pods[got]) {
			t.Errorf("an h2c upgrade with X-Dev %s: %q, %v", dev, got, err)
		}
	}

	// gRPC-framed calls, unary and streaming, with and without the header.
	for _, dev := range []string{"alice", ""} {
		for _, messages := range [][]string{{"one"}, {"a", "b", "c"}} {
			answers, status, err := grpcCall(h2, dev, messages...)
			if err != nil || status != "0" || len(answers) != len(messages) {
				t.Fatalf("gRPC call of %v with X-Dev %q: %v, status %q, %v", messages, dev, answers, status, err)
			}
			for i, got := range answers {
				who, msg, _ := strings.Cut(got, ": ")
				if msg != messages[i] || (dev == "alice") != (who == "alice") || (dev == "" && !pods[who]) {
					t.Errorf("gRPC call with X-Dev %q: answer %d is %q", dev, i, got)
				}
			}
		}
	}

	// Not HTTP: the deployed pods answer it; malformed and huge headers:
	// the agent answers, and goes on.
	raw := func(send string) string {
		c, err := net.DialTimeout("tcp", address, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		go io.WriteString(c, send)
		line, _ := bufio.NewReader(c).ReadString('\n')
		return strings.TrimSpace(line)
	}
	if got := raw("\x16\x03\x01\x00\x05hello"); !strings.HasSuffix(got, " not HTTP") || !pods[strings.TrimSuffix(got, " not HTTP")] {
		t.Errorf("TLS-like bytes were answered %q, want a deployed pod's NAME not HTTP", got)
	}
	if got := raw("GET / HTTP/1.1\r\nHost: shop\r\nX-Big: " + strings.Repeat("x", 100<<10) + "\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 431") {
		t.Errorf("a 100 KiB header was answered %q, want 431", got)
	}
	if got := raw("GET / HTTP/1.1\r\nHost: shop\r\nno colon\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 400") {
		t.Errorf("a malformed header was answered %q, want 400", got)
	}
	if got, err := ask(h2, "bob"); err != nil || got != "bob HTTP/2.0" {
		t.Errorf("after the bad requests, bob's: %q, %v", got, err)
	}

	// Scale 2 → 3 → 2: the other requests reach every ready pod, none
	// that is gone, and none fails.
	failures := 0
	spread := func(what string, want map[string]bool) {
		t.Helper()
		clustertest.Eventually(t, 60*time.Second, what, func() error {
			seen := map[string]bool{}
			for range 60 {
				got, err := ask(h1, "")
				if err != nil {
					failures++
					return err
				}
				seen[got] = true
			}
			for p := range seen {
				if !want[p] {
					return fmt.Errorf("answered by %s, not one of the ready pods %v", p, want)
				}
			}
			if len(seen) != len(want) {
				return fmt.Errorf("answered by %v, not every ready pod of %v", seen, want)
			}
			return nil
		})
	}
	k.Kubectl(t, "scale", "deployment/shop", "--replicas=3")
	k.Kubectl(t, "rollout", "status", "deployment/shop", "--timeout=90s")
	three := k.shopPods(t)
	spread("requests spread over the 3 pods", three)
	k.Kubectl(t, "scale", "deployment/shop", "--replicas=2")
	clustertest.Until(t, 60*time.Second, "2 pods of shop left", func() bool {
		out, _ := k.TryKubectl("get", "pod", "-l", "app=shop", "-o", "name")
		return len(strings.Fields(out)) == 2
	})
	two := k.shopPods(t)
	spread("requests spread over the 2 pods left", two)
	if failures > 0 {
		t.Errorf("%d requests failed while shop scaled", failures)
	}

	// The cost of the routing, for the README: the same requests straight
	// to a pod, and through the agent to the pods and to a run.
	var pod string
	for p := range two {
		pod = p
	}
	podIP := strings.TrimSpace(k.Kubectl(t, "get", "pod", pod, "-o", "jsonpath={.status.podIP}"))
	for _, m := range []struct {
		what, address, dev string
	}{
		{"straight to a pod", net.JoinHostPort(podIP, "8080"), ""},
		{"through the agent to the pods", address, ""},
		{"through the agent to a run", address, "bob"},
	} {
		for _, h2 := range []bool{false, true} {
			t.Logf("cost: %s, %s", m.what, measure(t, caller(m.address, h2), m.dev))
		}
	}

	// One Ctrl-C leaves the other's filter working; the last one out
	// restores shop exactly.
	devs["alice"].Close()
	if got, err := ask(h1, "bob"); err != nil || got != "bob HTTP/1.1" {
		t.Errorf("bob's request after alice left: %q, %v", got, err)
	}
	if got, err := ask(h1, "alice"); err != nil || !two[got] {
		t.Errorf("alice's request after alice left: %q, %v; want a deployed pod", got, err)
	}
	if k.snapshot(t, "shop").sameAs(before) == nil {
		t.Fatal("shop was given back while bob still takes it over")
	}
	svc, err := k.admin.Services(k.Namespace).Get(bg, "shop")
	if err != nil {
		t.Fatal(err)
	}
	if r, _, err := receiptOf(svc); err != nil || r.Holder.User != "bob" {
		t.Errorf("after alice left, shop's receipt names %+v (%v), want bob's run", r.Holder, err)
	}
	devs["bob"].Close()
	clustertest.Eventually(t, 30*time.Second, "shop restored", func() error { return k.snapshot(t, "shop").sameAs(before) })
	if spec := k.Kubectl(t, "get", "service", "shop", "-o", "jsonpath={.spec}"); spec != specBefore {
		t.Errorf("shop's spec is\n%s\nwas\n%s", spec, specBefore)
	}
	if restarts := k.Kubectl(t, "get", "pod", a.pod(t), "-o", "jsonpath={.status.containerStatuses[0].restartCount}"); restarts != "0" {
		t.Errorf("the agent restarted %s times", restarts)
	}
}

// measure sends 500 requests one after the other over c, then as many as
// 8 callers on c's one connection manage in 2 s, and says the latency's
// p50 and p99 and the requests per second.
func measure(t *testing.T, c *http.Client, dev string) string {
	t.Helper()
	var took []time.Duration
	for range 500 {
		start := time.Now()
		if _, err := ask(c, dev); err != nil {
			t.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	var done atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(2 * time.Second)
	for range 8 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				if _, err := ask(c, dev); err == nil {
					done.Add(1)
				}
			}
		})
	}
	wg.Wait()
	proto := "HTTP/1.1"
	if c.Transport.(*http.Transport).Protocols.UnencryptedHTTP2() {
		proto = "h2c"
	}
	return fmt.Sprintf("%s: p50 %v, p99 %v, %d requests/s", proto, took[len(took)/2].Round(time.Microsecond), took[len(took)*99/100].Round(time.Microsecond), done.Load()/2)
}
