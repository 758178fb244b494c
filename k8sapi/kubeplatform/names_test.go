package kubeplatform

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"plug/k8sapi"
	"plug/tunnel"
	"plug/tunnel/tunneltest"
	"plug/tunnel/tunneltest/faults"
)

func TestClusterDomain(t *testing.T) {
	for conf, want := range map[string]string{
		"search shop.svc.cluster.local svc.cluster.local cluster.local\nnameserver 198.18.16.10\noptions ndots:5\n": "cluster.local",
		"nameserver 10.0.0.10\nsearch shop.svc.corp.example. svc.corp.example. corp.example.\n":                     "corp.example",
		"":                     "cluster.local",
		"search example.com\n": "cluster.local",
	} {
		if got := clusterDomain(conf); got != want {
			t.Errorf("clusterDomain(%q) = %q, want %q", conf, got, want)
		}
	}
}

func TestServiceNames(t *testing.T) {
	svc := func(name string, ports ...k8sapi.ServicePort) k8sapi.Service {
		return k8sapi.Service{Metadata: k8sapi.ObjectMeta{Name: name}, Spec: k8sapi.ServiceSpec{Ports: ports}}
	}
	services := map[string]k8sapi.Service{
		"web":  svc("web", k8sapi.ServicePort{Port: 8080}, k8sapi.ServicePort{Port: 80, Protocol: "TCP"}, k8sapi.ServicePort{Port: 80, Protocol: "UDP"}),
		"dns":  svc("dns", k8sapi.ServicePort{Port: 53, Protocol: "UDP"}),
		"none": svc("none"),
		"api":  svc("api", k8sapi.ServicePort{Port: 9000}),
	}
	helper := svc("plug-vol-1", k8sapi.ServicePort{Port: 445})
	helper.Metadata.Labels = map[string]string{LabelManagedBy: ManagedBy, LabelVolume: "plug-vol-1"}
	services["plug-vol-1"] = helper
	got := serviceNames(nil, keptAll(services, "shop"), "shop", true)
	want := []tunnel.ClusterName{
		{Name: "api", Aliases: []string{"api.shop", "api.shop.svc", "api.shop.svc.cluster.local"}, Ports: []int{9000}},
		{Name: "dns", Aliases: []string{"dns.shop", "dns.shop.svc", "dns.shop.svc.cluster.local"}, UDPPorts: []int{53}},
		// A volume helper's Service: dialled for its run, told to none.
		{Name: "plug-vol-1", Aliases: []string{"plug-vol-1.shop", "plug-vol-1.shop.svc", "plug-vol-1.shop.svc.cluster.local"}, Ports: []int{445}, Unlisted: true},
		{Name: "web", Aliases: []string{"web.shop", "web.shop.svc", "web.shop.svc.cluster.local"}, Ports: []int{80, 8080}, UDPPorts: []int{80}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("serviceNames = %+v\nwant %+v", got, want)
	}
}

// keptAll is what WatchNames keeps of services, of namespace ns, in a
// cluster whose domain is cluster.local.
func keptAll(services map[string]k8sapi.Service, ns string) map[string]keptService {
	w := &nameWatch{p: &Platform{ns: fakeNS}, domain: "cluster.local"}
	out := map[string]keptService{}
	for _, s := range services {
		if name, kept, ok := w.keep(s, ns); ok {
			out[name] = kept
		}
	}
	return out
}

// The Service kubernetes of namespace default stands for the API server's
// address, its ClusterIP, whether default is the agent's namespace or one
// offered; a Service kubernetes of another namespace stands for nothing.
func TestServiceNamesTheAPIServer(t *testing.T) {
	api := map[string]k8sapi.Service{"kubernetes": {Metadata: k8sapi.ObjectMeta{Name: "kubernetes"},
		Spec: k8sapi.ServiceSpec{ClusterIP: "10.96.0.1", Ports: []k8sapi.ServicePort{{Port: 443}}}}}
	want := []netip.Addr{netip.MustParseAddr("10.96.0.1")}
	for _, own := range []bool{false, true} {
		got := serviceNames(nil, keptAll(api, "default"), "default", own)
		if len(got) != 1 || !slices.Equal(got[0].Protected, want) || !slices.Contains(append(got[0].Aliases, got[0].Name), "kubernetes.default") {
			t.Errorf("namespace default (own %t): %+v, want kubernetes.default standing for 10.96.0.1", own, got)
		}
	}
	if got := serviceNames(nil, keptAll(api, "data"), "data", false); len(got) != 1 || got[0].Protected != nil {
		t.Errorf("namespace data: %+v, want a name standing for no protected address", got)
	}
}

// WatchNames publishes the namespace's names at once and on every change,
// also across a watch the server ends and one it can no longer resume.
func TestWatchNamesFollowsTheServices(t *testing.T) {
	f := newFakeKube(t)
	f.deployWeb(t, 1)
	p := f.platform(t, "", nil)
	w := tunneltest.WatchNames(t, p)
	next := func(want ...string) {
		t.Helper()
		if got := w.Next(t); !slices.Equal(got, want) {
			t.Fatalf("names %v, want %v", got, want)
		}
	}
	next("web [80 9090]")
	f.create(t, k8sapi.KindService, `{"metadata": {"name": "api"}, "spec": {"ports": [{"port": 9000}]}}`)
	next("api [9000]", "web [80 9090]")
	f.EndWatches()
	if err := f.admin.Services(fakeNS).Delete(bg, "web", nil); err != nil {
		t.Fatal(err)
	}
	next("api [9000]")
	// Changes the watch of Services does not see, then forgotten: it
	// cannot resume, and lists again.
	f.pod(t, "web-2", "10.1.0.2", map[string]string{"app": "web"})
	f.Compact()
	from := len(f.Requests())
	f.EndWatches()
	f.create(t, k8sapi.KindService, `{"metadata": {"name": "db"}, "spec": {"ports": [{"port": 5432}]}}`)
	next("api [9000]", "db [5432]")
	if faults.Count(f.Requests()[from:], "list services") != 1 {
		t.Errorf("after the watch could not resume, Services were listed %d times, want once", faults.Count(f.Requests()[from:], "list services"))
	}
	if err := w.Stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("WatchNames ended with %v, want context.Canceled", err)
	}
}

// The Services of another namespace are names "svc.ns" once the agent may
// list and watch them there; until then they are left out, and NameNotes
// says how to offer the namespace. Granting takes effect without a restart.
func TestWatchNamesOfferedNamespaces(t *testing.T) {
	f := newFakeKube(t)
	f.create(t, k8sapi.KindService, `{"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}}`)
	for _, ns := range []string{"data", "secret"} {
		m := map[string]any{"metadata": map[string]any{"name": "db"}, "spec": map[string]any{"ports": []any{map[string]any{"port": 5432}}}}
		if _, err := k8sapi.Resources[map[string]any](f.admin, k8sapi.KindService, ns).Create(bg, &m); err != nil {
			t.Fatal(err)
		}
	}
	denied := map[string]bool{"secret": true}
	var mu sync.Mutex
	f.Allow(func(a k8sapi.ResourceAttributes) bool {
		mu.Lock()
		defer mu.Unlock()
		return !denied[a.Namespace]
	})
	p := f.platform(t, "", func(o *Options) { o.Namespaces = []string{"data, secret", fakeNS} })
	w := tunneltest.WatchNames(t, p)
	want := []string{"web [80]", "db.data [5432]"}
	// The names and the refusal of "secret" come in either order.
	got := w.Next(t)
	for !slices.Equal(got, want) || len(p.NameNotes()) == 0 {
		got = w.Next(t)
	}
	notes := p.NameNotes()
	if len(notes) != 1 || !strings.Contains(notes[0], "namespace secret is not offered by the agent") ||
		!strings.Contains(notes[0], "kubectl -n secret create role plug-names --verb=list,watch --resource=services && kubectl -n secret create rolebinding plug-names --role=plug-names --serviceaccount="+fakeNS+":plug") {
		t.Fatalf("NameNotes = %q, want the commands offering namespace secret", notes)
	}
	rights, err := p.Rights(bg)
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, r := range rights {
		if !r.Granted {
			missing = append(missing, r.Rule)
		}
	}
	if !slices.Equal(missing, []string{"list services in namespace secret", "watch services in namespace secret"}) {
		t.Errorf("missing rights %q, want list and watch services in namespace secret", missing)
	}

	mu.Lock()
	denied["secret"] = false
	mu.Unlock()
	want = []string{"web [80]", "db.data [5432]", "db.secret [5432]"}
	for got = w.Next(t); !slices.Equal(got, want); got = w.Next(t) {
	}
	if notes := p.NameNotes(); len(notes) != 0 {
		t.Errorf("NameNotes = %q once granted, want none", notes)
	}
}

// Once default is followed, the ClusterIP of its Service kubernetes is
// protected, though the agent reaches the API server at another address,
// and kubernetes.default stands for it.
func TestWatchNamesProtectsTheAPIServersServiceAddress(t *testing.T) {
	f := newFakeKube(t)
	m := map[string]any{"metadata": map[string]any{"name": "kubernetes"}, "spec": map[string]any{"clusterIP": "10.96.0.1", "ports": []any{map[string]any{"port": 443}}}}
	if _, err := k8sapi.Resources[map[string]any](f.admin, k8sapi.KindService, "default").Create(bg, &m); err != nil {
		t.Fatal(err)
	}
	p := f.platform(t, "", func(o *Options) { o.Namespaces = []string{"default"} })
	api := netip.MustParseAddr("10.96.0.1")
	if slices.Contains(p.ProtectedAddrs(), api) {
		t.Fatalf("ProtectedAddrs %v before WatchNames: the fake API server is not at 10.96.0.1", p.ProtectedAddrs())
	}
	w := tunneltest.WatchNames(t, p)
	for got := w.Next(t); !slices.Equal(got, []string{"kubernetes.default [443]"}); got = w.Next(t) {
	}
	if !slices.Contains(p.ProtectedAddrs(), api) {
		t.Errorf("ProtectedAddrs %v, want the kubernetes Service's 10.96.0.1 among them", p.ProtectedAddrs())
	}
}

// A name of a namespace neither the agent's nor listed is explained with
// the commands that offer that namespace; the names of the others, and
// names of no namespace's form, are not.
func TestExplainName(t *testing.T) {
	p := newFakeKube(t).platform(t, "", func(o *Options) { o.Namespaces = []string{"data"} })
	offer := "kubectl -n default create role plug-names --verb=list,watch --resource=services && kubectl -n default create rolebinding plug-names --role=plug-names --serviceaccount=" + fakeNS + ":plug"
	for _, host := range []string{"kubernetes.default", "kubernetes.default.svc", "Kubernetes.Default.svc.cluster.local."} {
		if got := p.ExplainName(host); !strings.Contains(got, "PLUG_NAMESPACES") || !strings.HasSuffix(got, offer) {
			t.Errorf("ExplainName(%q) = %q, want PLUG_NAMESPACES and the commands %q", host, got, offer)
		}
	}
	for _, host := range []string{"db.data", "db." + fakeNS + ".svc", "web", "www.example.com", "db.-bad-"} {
		if got := p.ExplainName(host); got != "" {
			t.Errorf("ExplainName(%q) = %q, want nothing", host, got)
		}
	}
}

func TestParseNamespaces(t *testing.T) {
	got, err := ParseNamespaces("data, messaging,,data plug", "plug")
	if err != nil || !slices.Equal(got, []string{"data", "messaging"}) {
		t.Errorf("ParseNamespaces = %q, %v; want data, messaging", got, err)
	}
	for _, bad := range []string{"Data", "-x", "a.b", "x\x1b[2J"} {
		if _, err := ParseNamespaces(bad, "plug"); err == nil || !strings.Contains(err.Error(), "is not a namespace name") || strings.Contains(err.Error(), "\x1b") {
			t.Errorf("ParseNamespaces(%q) = %v, want a refusal naming the form", bad, err)
		}
	}
}
