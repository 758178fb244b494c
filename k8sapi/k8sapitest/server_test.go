package k8sapitest_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"reflect"
	"testing"
	"time"

	"plug/k8sapi"
	"plug/k8sapi/k8sapitest"
)

var bg = context.Background()

func newServer(t *testing.T) (*k8sapitest.Server, *k8sapi.Client) {
	s := k8sapitest.NewServer()
	t.Cleanup(s.Close)
	return s, s.Client()
}

func web() *k8sapi.Service {
	return &k8sapi.Service{
		Metadata: k8sapi.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: k8sapi.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []k8sapi.ServicePort{
			{Name: "http", Port: 80, TargetPort: &k8sapi.IntOrString{String: "http"}}, {Name: "admin", Port: 9090},
		}},
	}
}

// A Service is defaulted as the API server does, and its ClusterIP cannot
// change; names are unique; a Service with an invalid name is refused.
func TestServicesAreDefaultedAndValidated(t *testing.T) {
	_, c := newServer(t)
	svcs := c.Services("ns")
	created, err := svcs.Create(bg, web())
	if err != nil {
		t.Fatal(err)
	}
	want := []k8sapi.ServicePort{
		{Name: "http", Protocol: "TCP", Port: 80, TargetPort: &k8sapi.IntOrString{String: "http"}},
		{Name: "admin", Protocol: "TCP", Port: 9090, TargetPort: &k8sapi.IntOrString{Int: 9090}},
	}
	m := created.Metadata
	if created.Spec.Type != "ClusterIP" || created.Spec.ClusterIP == "" || !reflect.DeepEqual(created.Spec.Ports, want) ||
		m.UID == "" || m.ResourceVersion == "" || m.Namespace != "ns" {
		t.Errorf("created: %+v", created)
	}
	if _, err := svcs.Create(bg, web()); !k8sapi.IsAlreadyExists(err) {
		t.Errorf("a second create: %v, want AlreadyExists", err)
	}
	if _, err := svcs.MergePatch(bg, "web", map[string]any{"spec": map[string]any{"clusterIP": "10.0.0.1"}}); !k8sapi.IsInvalid(err) {
		t.Errorf("changing the ClusterIP: %v, want Invalid", err)
	}
	bad := web()
	bad.Metadata.Name = "Bad_Name"
	if _, err := svcs.Create(bg, bad); !k8sapi.IsInvalid(err) {
		t.Errorf("a bad name: %v, want Invalid", err)
	}
	unnamed := web()
	unnamed.Metadata.Name, unnamed.Spec.Ports[1].Name = "two", ""
	if _, err := svcs.Create(bg, unnamed); !k8sapi.IsInvalid(err) {
		t.Errorf("two ports, one unnamed: %v, want Invalid", err)
	}
}

// Writes conditioned on an outdated resourceVersion conflict: updates,
// merge and JSON patches, deletes with preconditions. A write that
// changes nothing leaves the resourceVersion.
func TestStaleWritesConflict(t *testing.T) {
	s, c := newServer(t)
	svcs := c.Services("ns")
	old, err := svcs.Create(bg, web())
	if err != nil {
		t.Fatal(err)
	}
	cur, err := svcs.MergePatch(bg, "web", map[string]any{"metadata": map[string]any{"annotations": map[string]string{"a": "1"}}})
	if err != nil || cur.Metadata.ResourceVersion == old.Metadata.ResourceVersion {
		t.Fatalf("a patch: %+v, %v", cur.Metadata, err)
	}
	rv := old.Metadata.ResourceVersion
	if _, err := svcs.MergePatch(bg, "web", map[string]any{"metadata": map[string]any{"resourceVersion": rv}}); !k8sapi.IsConflict(err) {
		t.Errorf("a stale merge patch: %v", err)
	}
	ops := []k8sapi.PatchOp{{Op: "replace", Path: "/metadata/resourceVersion", Value: rv}, {Op: "add", Path: "/spec/selector", Value: nil}}
	if _, err := svcs.JSONPatch(bg, "web", ops); !k8sapi.IsConflict(err) {
		t.Errorf("a stale JSON patch: %v", err)
	}
	if _, err := svcs.Update(bg, "web", old); !k8sapi.IsConflict(err) {
		t.Errorf("a stale update: %v", err)
	}
	if err := svcs.Delete(bg, "web", &k8sapi.Preconditions{ResourceVersion: rv}); !k8sapi.IsConflict(err) {
		t.Errorf("a stale delete: %v", err)
	}
	if err := svcs.Delete(bg, "web", &k8sapi.Preconditions{UID: "another"}); !k8sapi.IsConflict(err) {
		t.Errorf("a delete of another uid: %v", err)
	}
	before := s.ResourceVersion()
	if _, err := svcs.MergePatch(bg, "web", map[string]any{"metadata": map[string]any{"annotations": map[string]string{"a": "1"}}}); err != nil {
		t.Fatal(err)
	}
	if s.ResourceVersion() != before {
		t.Error("a patch that changes nothing moved the resourceVersion")
	}
	if err := svcs.Delete(bg, "web", &k8sapi.Preconditions{UID: cur.Metadata.UID, ResourceVersion: cur.Metadata.ResourceVersion}); err != nil {
		t.Fatal(err)
	}
	if _, err := svcs.Get(bg, "web"); !k8sapi.IsNotFound(err) {
		t.Errorf("after the delete: %v", err)
	}
}

// JSON patches apply add, remove, replace and test at escaped pointers;
// nulls and empty objects are dropped, as from a typed object.
func TestJSONPatchOperations(t *testing.T) {
	_, c := newServer(t)
	svcs := c.Services("ns")
	if _, err := svcs.Create(bg, web()); err != nil {
		t.Fatal(err)
	}
	got, err := svcs.JSONPatch(bg, "web", []k8sapi.PatchOp{
		{Op: "add", Path: "/metadata/annotations", Value: map[string]string{"plug.dev/receipt": "r"}},
		{Op: "test", Path: "/metadata/annotations/" + k8sapi.PointerEscape("plug.dev/receipt"), Value: "r"},
		{Op: "add", Path: "/spec/ports/-", Value: k8sapi.ServicePort{Name: "extra", Port: 8080}},
		{Op: "remove", Path: "/spec/ports/1"},
		{Op: "replace", Path: "/spec/ports/0/name", Value: "web"},
		{Op: "add", Path: "/spec/selector", Value: nil},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.Metadata.Annotations["plug.dev/receipt"] != "r" || got.Spec.Selector != nil || len(got.Spec.Ports) != 2 ||
		got.Spec.Ports[0].Name != "web" || got.Spec.Ports[1].Name != "extra" || got.Spec.Ports[1].Protocol != "TCP" {
		t.Errorf("patched: %+v %+v", got.Metadata, got.Spec)
	}
	raw, err := k8sapi.Resources[map[string]any](c, k8sapi.KindService, "ns").Get(bg, "web")
	if err != nil {
		t.Fatal(err)
	}
	if _, has := (*raw)["spec"].(map[string]any)["selector"]; has {
		t.Error("a null selector is kept, not dropped")
	}
	for _, bad := range [][]k8sapi.PatchOp{
		{{Op: "test", Path: "/spec/type", Value: "NodePort"}},
		{{Op: "replace", Path: "/spec/missing", Value: 1}},
		{{Op: "remove", Path: "/spec/ports/7"}},
		{{Op: "move", Path: "/spec/type", Value: "x"}},
	} {
		if _, err := svcs.JSONPatch(bg, "web", bad); !k8sapi.IsInvalid(err) {
			t.Errorf("%+v: %v, want Invalid", bad, err)
		}
	}
}

// Lists and watches select by label: k=v, k!=v, k and !k.
func TestLabelSelectors(t *testing.T) {
	_, c := newServer(t)
	for name, labels := range map[string]map[string]string{
		"a": {"app": "web", "tier": "front"}, "b": {"app": "web"}, "c": {"app": "db"},
	} {
		if _, err := c.Pods("ns").Create(bg, &k8sapi.Pod{Metadata: k8sapi.ObjectMeta{Name: name, Labels: labels}}); err != nil {
			t.Fatal(err)
		}
	}
	for sel, want := range map[string][]string{
		"":                 {"a", "b", "c"},
		"app=web":          {"a", "b"},
		"app==web,tier":    {"a"},
		"app!=web":         {"c"},
		"app=web,!tier":    {"b"},
		"tier=back":        nil,
		"app in (web, db)": {"error"},
	} {
		list, err := c.Pods("ns").List(bg, k8sapi.ListOptions{LabelSelector: sel})
		var got []string
		if err != nil {
			got = []string{"error"}
		} else {
			for _, p := range list.Items {
				got = append(got, p.Metadata.Name)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q selects %v, want %v", sel, got, want)
		}
	}
}

// A watch sees changes from its resourceVersion on; the server ending it
// is resumed, and a resourceVersion forgotten answers 410 Expired.
func TestWatchResumesAndExpires(t *testing.T) {
	s, c := newServer(t)
	pods := c.Pods("ns")
	list, err := pods.List(bg, k8sapi.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := pods.Watch(bg, k8sapi.ListOptions{ResourceVersion: list.Metadata.ResourceVersion, LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	pod := &k8sapi.Pod{Metadata: k8sapi.ObjectMeta{Name: "p", Labels: map[string]string{"app": "web"}}}
	if _, err := pods.Create(bg, pod); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.MergePatch(bg, "p", map[string]any{"metadata": map[string]any{"labels": map[string]string{"app": "db"}}}); err != nil {
		t.Fatal(err)
	}
	var last string
	for _, want := range []k8sapi.EventType{k8sapi.Added, k8sapi.Deleted} { // moved out of the selection
		ev, err := w.Next()
		if err != nil || ev.Type != want || ev.Object.Metadata.Name != "p" {
			t.Fatalf("event %+v, %v; want %s of p", ev, err, want)
		}
		last = ev.ResourceVersion
	}
	s.EndWatches()
	if _, err := w.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after EndWatches: %v, want the watch ended", err)
	}
	if err := pods.Delete(bg, "p", nil); err != nil {
		t.Fatal(err)
	}
	w2, err := pods.Watch(bg, k8sapi.ListOptions{ResourceVersion: last})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	if ev, err := w2.Next(); err != nil || ev.Type != k8sapi.Deleted {
		t.Fatalf("resumed: %+v, %v; want the delete", ev, err)
	}
	s.Compact()
	w3, err := pods.Watch(bg, k8sapi.ListOptions{ResourceVersion: last})
	if err != nil {
		t.Fatal(err)
	}
	defer w3.Close()
	if _, err := w3.Next(); !k8sapi.IsGone(err) {
		t.Fatalf("a watch from a forgotten version: %v, want Gone", err)
	}
}

// A fault answers the Nth matching request, or acts before it; Allow
// decides both the requests and the access reviews.
func TestFaultsAndRights(t *testing.T) {
	s, c := newServer(t)
	svcs := c.Services("ns")
	if _, err := svcs.Create(bg, web()); err != nil {
		t.Fatal(err)
	}
	in := s.Inject(k8sapitest.Fault{Match: k8sapitest.On("get", "services", "web"), Skip: 1, Times: 2, Code: http.StatusServiceUnavailable})
	var got []bool
	for range 4 {
		_, err := svcs.Get(bg, "web")
		got = append(got, k8sapi.IsTemporary(err))
	}
	if want := []bool{false, true, true, false}; !reflect.DeepEqual(got, want) || in.Applied() != 2 {
		t.Errorf("503 on the 2nd and 3rd get: temporary failures %v, applied %d", got, in.Applied())
	}
	in.Remove()

	s.Inject(k8sapitest.Fault{Match: k8sapitest.On("patch", "", ""), Times: 1, Before: func(k8sapitest.Request) {
		if _, err := svcs.MergePatch(bg, "web", map[string]any{"metadata": map[string]any{"labels": map[string]string{"by": "other"}}}); err != nil {
			t.Error(err)
		}
	}})
	cur, _ := svcs.Get(bg, "web")
	if _, err := svcs.MergePatch(bg, "web", map[string]any{"metadata": map[string]any{"resourceVersion": cur.Metadata.ResourceVersion}}); !k8sapi.IsConflict(err) {
		t.Errorf("a patch another writer came before: %v, want Conflict", err)
	}

	s.Allow(func(a k8sapi.ResourceAttributes) bool { return a.Verb != "delete" })
	if err := svcs.Delete(bg, "web", nil); !k8sapi.IsForbidden(err) {
		t.Errorf("a delete not allowed: %v, want Forbidden", err)
	}
	for verb, want := range map[string]bool{"delete": false, "get": true} {
		ok, err := c.CanI(bg, k8sapi.ResourceAttributes{Namespace: "ns", Verb: verb, Resource: "services"})
		if err != nil || ok != want {
			t.Errorf("CanI %s: %v, %v; want %v", verb, ok, err, want)
		}
	}
}

// During an outage requests fail as when the server is unreachable, and
// open watches are dropped; afterwards everything is there.
func TestOutage(t *testing.T) {
	s, c := newServer(t)
	svcs := c.Services("ns")
	if _, err := svcs.Create(bg, web()); err != nil {
		t.Fatal(err)
	}
	w, err := svcs.Watch(bg, k8sapi.ListOptions{ResourceVersion: s.ResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	s.SetDown(true)
	if _, err := w.Next(); err == nil || errors.Is(err, io.EOF) {
		t.Errorf("a watch in the outage: %v, want it cut off", err)
	}
	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	if _, err := svcs.Get(ctx, "web"); err == nil || !k8sapi.IsTemporary(err) || ctx.Err() != nil {
		t.Errorf("a get in the outage: %v, want a temporary failure at once", err)
	}
	s.SetDown(false)
	if _, err := svcs.Get(bg, "web"); err != nil {
		t.Errorf("after the outage: %v", err)
	}
}
