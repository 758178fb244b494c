package kubeplatform

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"plug/k8sapi"
	"plug/tunnel"
	"plug/tunnel/clustertest"
)

// kube is the real test cluster as a test of the platform sees it.
type kube struct {
	*clustertest.Kube
	admin    *k8sapi.Client // the cluster admin, from the kubeconfig
	agentCfg k8sapi.Config  // the plug service account with the Role of deploy/plug-k8s.yaml
	agent    *k8sapi.Client
	local    *localProcess
}

// needKube returns the test cluster with a namespace of the test's own,
// holding the service account, Role, RoleBinding and state Secret of
// deploy/plug-k8s.yaml. The platform under test runs with that service
// account's rights, so the tests prove the Role is enough.
func needKube(t *testing.T) *kube {
	t.Helper()
	k := &kube{Kube: clustertest.NeedKube(t)}
	k.setupClients(t)
	return k
}

// setupClients makes the admin and agent clients of k's namespace, and the
// local process.
func (k *kube) setupClients(t *testing.T) {
	t.Helper()
	cfg, err := k8sapi.LoadKubeconfig(k.Kubeconfig, "")
	if err != nil {
		t.Fatal(err)
	}
	if k.admin, err = k8sapi.New(cfg); err != nil {
		t.Fatal(err)
	}
	k.Apply(t, agentRBAC(t))
	token := strings.TrimSpace(k.Kubectl(t, "create", "token", "plug", "--duration=1h"))
	tlsCfg := cfg.TLS.Clone()
	tlsCfg.Certificates = nil // the service account authenticates by its token alone
	k.agentCfg = k8sapi.Config{Server: cfg.Server, TLS: tlsCfg, Token: func() (string, error) { return token, nil }}
	if k.agent, err = k8sapi.New(k.agentCfg); err != nil {
		t.Fatal(err)
	}
	k.local = startLocalProcess(t, k.NodeIP, "local")
}

// agentRBAC is the part of deploy/plug-k8s.yaml that gives the agent its
// identity and rights (not the Deployment nor the NodePort Service, which
// the tests of the deployed agent cover).
func agentRBAC(t *testing.T) string {
	raw, err := os.ReadFile("../../deploy/plug-k8s.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var keep []string
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		for _, kind := range []string{"ServiceAccount", "Role", "RoleBinding", "Secret"} {
			if strings.Contains(doc, "\nkind: "+kind+"\n") {
				keep = append(keep, doc)
			}
		}
	}
	if len(keep) != 5 {
		t.Fatalf("deploy/plug-k8s.yaml: found %d of the ServiceAccount, Role, RoleBinding and two Secrets", len(keep))
	}
	return strings.Join(keep, "\n---\n")
}

// platform returns a Platform acting as agent pod pod (may be "") whose
// address is the node's, where the test's local process listens.
func (k *kube) platform(t *testing.T, pod string, client *k8sapi.Client, tune func(*Options)) *Platform {
	t.Helper()
	if client == nil {
		client = k.agent
	}
	return newPlatform(t, Options{Client: client, Namespace: k.Namespace, PodName: pod, PodIP: k.NodeIP, Logf: t.Logf}, tune)
}

// newPlatform returns the Platform of opts, as tune (if not nil) changes
// them.
func newPlatform(t *testing.T, opts Options, tune func(*Options)) *Platform {
	t.Helper()
	if opts.Namespace == fakeNS {
		opts.HandBack = time.Millisecond // no EndpointSlice controller runs on the fake
	}
	if tune != nil {
		tune(&opts)
	}
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// run is a binding of the test's local process as name:port for run id.
func (k *kube) run(id, name string, port int) tunnel.Binding {
	return runBinding(id, name, port, k.local.port)
}

// runBinding is a binding of name:port to the agent's port target, for
// run id of the developer "dev".
func runBinding(id, name string, port, target int) tunnel.Binding {
	return tunnel.Binding{Name: name, Port: port, Target: target, Holder: tunnel.Holder{
		Run: id, Agent: "test-agent", Developer: "SHA256:test", User: "dev", Since: time.Now(),
	}}
}

// localProcess is the developer's process: an HTTP server on the node's
// address, which pods reach, answering GET / with its name.
type localProcess struct {
	port int
	hits atomic.Int32
}

func startLocalProcess(t *testing.T, ip, name string) *localProcess {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("listening on the node address: %v", err)
	}
	lp := &localProcess{port: l.Addr().(*net.TCPAddr).Port}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lp.hits.Add(1)
		fmt.Fprintln(w, name)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return lp
}

// The security contexts of the test's pods, admitted by Pod Security
// restricted.
const (
	podSecurity       = "{runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}"
	containerSecurity = "{allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}"
)

// deployWeb deploys the sample workload "web": replicas pods answering
// "deployed" on 8080 (port http) and 9090 (port admin), a Service in front
// with both ports, labels and annotations of its own, and a client pod
// to call it from. It returns when the pods are Ready.
func (k *kube) deployWeb(t *testing.T, replicas int) {
	t.Helper()
	k.Apply(t, k.servingDeployment("web", replicas, `serve, -name, deployed, ":8080", ":9090"`,
		`{name: http, containerPort: 8080}, {name: admin, containerPort: 9090}`)+fmt.Sprintf(`
---
apiVersion: v1
kind: Service
metadata:
  name: web
  labels: {app: web, tier: front}
  annotations: {owner: team-a}
spec:
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: http}
  - {name: admin, port: 9090, targetPort: 9090}
---
%s`, k.workloadPod("client", "pause")))
	k.Kubectl(t, "rollout", "status", "deployment/web", "--timeout=90s")
	k.Kubectl(t, "wait", "--for=condition=Ready", "--timeout=90s", "pod/client")
}

// servingDeployment is the manifest of the Deployment name: replicas pods
// labelled app: NAME running the test workload with args (YAML flow
// items), with ports, Ready once their port 8080 accepts connections, as
// Pod Security restricted admits them.
func (k *kube) servingDeployment(name string, replicas int, args, ports string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: %s}
spec:
  replicas: %d
  selector: {matchLabels: {app: %s}}
  template:
    metadata: {labels: {app: %s}}
    spec:
      terminationGracePeriodSeconds: 1
      securityContext: %s
      containers:
      - name: main
        image: %s
        imagePullPolicy: Never
        securityContext: %s
        args: [%s]
        ports: [%s]
        readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
`, name, replicas, name, name, podSecurity, k.WorkloadImage, containerSecurity, args, ports)
}

// workloadPod is the manifest of a pod called name running the test
// workload with args, as Pod Security restricted admits it.
func (k *kube) workloadPod(name string, args ...string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  terminationGracePeriodSeconds: 1
  securityContext: %s
  containers:
  - name: main
    image: %s
    imagePullPolicy: Never
    securityContext: %s
    args: [%s]
`, name, podSecurity, k.WorkloadImage, containerSecurity, strings.Join(args, ", "))
}

// answers makes n requests to url from the client pod, each on a new
// connection, and returns the answers.
func (k *kube) answers(n int, url string) ([]string, error) {
	out, err := k.TryKubectl("exec", "client", "--", "/workload", "get", "-n", fmt.Sprint(n), "-timeout", "3s", url)
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimSuffix(out, "\n"), "\n"), nil
}

// eventuallyAnswered polls until all 20 new connections to url are
// answered by want.
func (k *kube) eventuallyAnswered(t *testing.T, url, want string) {
	t.Helper()
	clustertest.Eventually(t, clustertest.Settle, "20/20 answers from "+want+" at "+url, func() error {
		got, err := k.answers(20, url)
		if err != nil {
			return err
		}
		if n := count(got, want); n != 20 {
			return fmt.Errorf("%d/20 answered by %s: %v", n, want, got)
		}
		return nil
	})
}

func count(lines []string, want string) int {
	n := 0
	for _, l := range lines {
		if l == want {
			n++
		}
	}
	return n
}

// snapshot is what a user compares of a Service before and after plug:
// its whole spec and its labels and annotations.
type snapshot struct {
	spec        any
	labels      any
	annotations any
	version     string
}

func (k *kube) snapshot(t *testing.T, name string) snapshot {
	t.Helper()
	return snapshotOf(t, k.admin, k.Namespace, name)
}

// snapshotOf reads the snapshot of Service name in ns.
func snapshotOf(t *testing.T, c *k8sapi.Client, ns, name string) snapshot {
	t.Helper()
	obj, err := k8sapi.Resources[map[string]any](c, k8sapi.KindService, ns).Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	meta := (*obj)["metadata"].(map[string]any)
	return snapshot{spec: (*obj)["spec"], labels: meta["labels"], annotations: meta["annotations"], version: meta["resourceVersion"].(string)}
}

// butHeartbeat is s without the heartbeat annotation, which the agent
// holding a Service renews on its own.
func (s snapshot) butHeartbeat() snapshot {
	if a, ok := s.annotations.(map[string]any); ok {
		a = maps.Clone(a)
		delete(a, AnnotationHeartbeat)
		s.annotations = a
	}
	return s
}

func (s snapshot) sameAs(o snapshot) error {
	switch {
	case !reflect.DeepEqual(s.spec, o.spec):
		return fmt.Errorf("spec is %v, was %v", s.spec, o.spec)
	case !reflect.DeepEqual(s.labels, o.labels):
		return fmt.Errorf("labels are %v, were %v", s.labels, o.labels)
	case !reflect.DeepEqual(s.annotations, o.annotations):
		return fmt.Errorf("annotations are %v, were %v", s.annotations, o.annotations)
	}
	return nil
}

// slicesOf returns the EndpointSlices of Service name, by who manages them.
func (k *kube) slicesOf(t *testing.T, name string) map[string][]k8sapi.EndpointSlice {
	t.Helper()
	return slicesByManager(t, k.admin, k.Namespace, name)
}

// slicesByManager returns the EndpointSlices of Service name in ns, by who
// manages them.
func slicesByManager(t *testing.T, c *k8sapi.Client, ns, name string) map[string][]k8sapi.EndpointSlice {
	t.Helper()
	list, err := c.EndpointSlices(ns).List(context.Background(), k8sapi.ListOptions{LabelSelector: k8sapi.LabelServiceName + "=" + name})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]k8sapi.EndpointSlice{}
	for _, s := range list.Items {
		by := s.Metadata.Labels[k8sapi.LabelSliceManagedBy]
		out[by] = append(out[by], s)
	}
	return out
}

// apiProxy stands between the platform and the API server, so a test can
// make the server unreachable, or act just before or after a request.
type apiProxy struct {
	*httptest.Server
	down atomic.Bool

	mu     sync.Mutex
	epoch  context.Context // ends when the server goes "down", cutting what is in flight
	cut    context.CancelFunc
	before func(r *http.Request)                         // runs before a request is passed on
	after  func(r *http.Request, status int) (down bool) // runs on each answer
}

// newAPIProxy returns a proxy to the test cluster's API server, and a
// client of the plug service account going through it.
func (k *kube) newAPIProxy(t *testing.T) (*apiProxy, *k8sapi.Client) {
	target, _ := url.Parse(k.Server)
	p := &apiProxy{}
	p.epoch, p.cut = context.WithCancel(context.Background())
	rp := &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport: &http.Transport{TLSClientConfig: k.agentCfg.TLS},
		ModifyResponse: func(resp *http.Response) error {
			p.mu.Lock()
			after := p.after
			p.mu.Unlock()
			if after != nil && after(resp.Request, resp.StatusCode) {
				p.setDown(true)
			}
			return nil
		},
		FlushInterval: -1,
	}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.down.Load() {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		p.mu.Lock()
		epoch, before := p.epoch, p.before
		p.mu.Unlock()
		if before != nil {
			before(r)
		}
		ctx, stop := context.WithCancel(r.Context())
		defer stop()
		context.AfterFunc(epoch, stop)
		rp.ServeHTTP(w, r.WithContext(ctx))
	}))
	t.Cleanup(p.Server.Close)
	cfg := k.agentCfg
	cfg.Server = p.URL
	c, err := k8sapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p, c
}

// setDown makes the API server unreachable through the proxy (cutting the
// requests in flight, watches included) or reachable again.
func (p *apiProxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if down && !p.down.Load() {
		p.cut()
		p.epoch, p.cut = context.WithCancel(context.Background())
	}
	p.down.Store(down)
}

func (p *apiProxy) hooks(before func(*http.Request), after func(*http.Request, int) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.before, p.after = before, after
}
