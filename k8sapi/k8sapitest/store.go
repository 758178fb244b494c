package k8sapitest

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"time"

	"plug/k8sapi"
)

// object is a stored object, as its JSON decodes into Go values.
type object = map[string]any

// key names a stored object.
type key struct {
	resource, ns, name string // resource is the kind's "group/version/resource"
}

func keyOf(kind k8sapi.Kind, ns, name string) key {
	return key{kind.APIVersion() + "/" + kind.Resource, ns, name}
}

// change is one write, as a watch sees it.
type change struct {
	rv       int64
	resource string
	ns       string
	typ      k8sapi.EventType
	obj, old object // old is the object before a modification
}

// historyLimit is how many changes the server remembers for watches.
const historyLimit = 1000

// store holds the objects and the history of their changes. The Server's
// mutex guards it.
type store struct {
	rv        int64
	objects   map[key]object
	history   []change
	forgotten int64         // the newest resourceVersion whose changes are forgotten
	changed   chan struct{} // closed (and replaced) on each change
	uids      int
	clusterIP int
}

func (st *store) init() {
	st.objects = map[key]object{}
	st.changed = make(chan struct{})
}

func (st *store) record(c change) {
	c.rv = st.rv
	st.history = append(st.history, c)
	if len(st.history) > historyLimit {
		st.forgotten = st.history[0].rv
		st.history = slices.Delete(st.history, 0, 1)
	}
	close(st.changed)
	st.changed = make(chan struct{})
}

func (st *store) compact() {
	st.forgotten = st.rv
	st.history = nil
}

func (st *store) get(kind k8sapi.Kind, ns, name string) (any, int, *apiError) {
	obj, ok := st.objects[keyOf(kind, ns, name)]
	if !ok {
		return nil, 0, notFound(kind, name)
	}
	return clone(obj), http.StatusOK, nil
}

// list returns the objects of kind in ns that sel selects, by name.
func (st *store) list(kind k8sapi.Kind, ns string, sel selector) object {
	items := []any{}
	for _, k := range slices.SortedFunc(maps.Keys(st.objects), func(a, b key) int { return cmp.Compare(a.name, b.name) }) {
		if k != keyOf(kind, ns, k.name) || !sel.matches(st.objects[k]) {
			continue
		}
		items = append(items, clone(st.objects[k]))
	}
	return object{
		"apiVersion": kind.APIVersion(),
		"kind":       kind.Name + "List",
		"metadata":   object{"resourceVersion": fmt.Sprint(st.rv)},
		"items":      items,
	}
}

func (st *store) create(kind k8sapi.Kind, ns string, body []byte) (any, int, *apiError) {
	obj, err := decodeObject(body)
	if err != nil {
		return nil, 0, err
	}
	m := meta(obj)
	name, _ := m["name"].(string)
	if name == "" {
		return nil, 0, invalid(kind, "", "metadata.name: Required value: name is required (k8sapitest does not generate names)")
	}
	if got, _ := m["namespace"].(string); got != "" && got != ns {
		return nil, 0, badRequest("the namespace of the provided object (%s) does not match the namespace sent on the request (%s)", got, ns)
	}
	if rv, _ := m["resourceVersion"].(string); rv != "" {
		return nil, 0, badRequest("resourceVersion should not be set on objects to be created")
	}
	k := keyOf(kind, ns, name)
	if _, exists := st.objects[k]; exists {
		return nil, 0, &apiError{http.StatusConflict, k8sapi.ReasonAlreadyExists, fmt.Sprintf("%s %q already exists", kind.Resource, name)}
	}
	st.uids++
	m["namespace"] = ns
	m["uid"] = fmt.Sprintf("00000000-0000-4000-8000-%012d", st.uids)
	m["creationTimestamp"] = time.Now().UTC().Format(time.RFC3339)
	if err := st.prepare(kind, obj, nil); err != nil {
		return nil, 0, err
	}
	st.write(kind, k, obj, nil)
	return clone(obj), http.StatusCreated, nil
}

func (st *store) update(kind k8sapi.Kind, ns, name string, body []byte) (any, int, *apiError) {
	old, ok := st.objects[keyOf(kind, ns, name)]
	if !ok {
		return nil, 0, notFound(kind, name)
	}
	obj, err := decodeObject(body)
	if err != nil {
		return nil, 0, err
	}
	if got, _ := meta(obj)["name"].(string); got != name {
		return nil, 0, badRequest("the name of the object (%s) does not match the name on the URL (%s)", got, name)
	}
	return st.replace(kind, ns, name, old, obj)
}

func (st *store) patch(kind k8sapi.Kind, ns, name, contentType string, body []byte) (any, int, *apiError) {
	old, ok := st.objects[keyOf(kind, ns, name)]
	if !ok {
		return nil, 0, notFound(kind, name)
	}
	var patched any
	var perr error
	switch contentType {
	case "application/merge-patch+json":
		var p any
		if err := json.Unmarshal(body, &p); err != nil {
			return nil, 0, badRequest("the merge patch is not JSON: %v", err)
		}
		patched = mergePatch(clone(old), p)
	case "application/json-patch+json":
		var ops []object
		if err := json.Unmarshal(body, &ops); err != nil {
			return nil, 0, badRequest("the JSON patch is not a list of operations: %v", err)
		}
		patched, perr = jsonPatch(clone(old), ops)
	default:
		return nil, 0, &apiError{http.StatusUnsupportedMediaType, "UnsupportedMediaType", fmt.Sprintf("the patch type %q is not supported by k8sapitest", contentType)}
	}
	obj, ok := patched.(object)
	if perr != nil || !ok {
		if perr == nil {
			perr = fmt.Errorf("the patched object is not an object")
		}
		return nil, 0, &apiError{http.StatusUnprocessableEntity, k8sapi.ReasonInvalid, "the server rejected our request due to an error in our request: " + perr.Error()}
	}
	m, om := meta(obj), meta(old)
	for _, f := range []string{"name", "namespace", "uid"} {
		if m[f] != om[f] {
			return nil, 0, invalid(kind, name, "metadata.%s: Invalid value: field is immutable", f)
		}
	}
	return st.replace(kind, ns, name, old, obj)
}

// replace writes obj in place of old, if obj names old's resourceVersion
// or none. Writing what is there already changes nothing.
func (st *store) replace(kind k8sapi.Kind, ns, name string, old, obj object) (any, int, *apiError) {
	m, om := meta(obj), meta(old)
	if rv, _ := m["resourceVersion"].(string); rv != "" && rv != om["resourceVersion"] {
		return nil, 0, conflict(kind, name, "the object has been modified; please apply your changes to the latest version and try again")
	}
	for _, f := range []string{"namespace", "uid", "creationTimestamp"} {
		m[f] = om[f]
	}
	if err := st.prepare(kind, obj, old); err != nil {
		return nil, 0, err
	}
	m["resourceVersion"] = om["resourceVersion"]
	if reflect.DeepEqual(obj, old) {
		return clone(old), http.StatusOK, nil
	}
	st.write(kind, keyOf(kind, ns, name), obj, old)
	return clone(obj), http.StatusOK, nil
}

// write stores obj (old is what it replaces, nil for a new object) at the
// next resourceVersion.
func (st *store) write(kind k8sapi.Kind, k key, obj, old object) {
	st.rv++
	meta(obj)["resourceVersion"] = fmt.Sprint(st.rv)
	st.objects[k] = obj
	typ := k8sapi.Modified
	if old == nil {
		typ = k8sapi.Added
	}
	st.record(change{resource: k.resource, ns: k.ns, typ: typ, obj: clone(obj), old: clone(old)})
}

func (st *store) remove(kind k8sapi.Kind, ns, name string, body []byte) (any, int, *apiError) {
	k := keyOf(kind, ns, name)
	obj, ok := st.objects[k]
	if !ok {
		return nil, 0, notFound(kind, name)
	}
	var opts struct {
		Preconditions *k8sapi.Preconditions `json:"preconditions"`
	}
	if len(body) > 0 {
		if err := json.Unmarshal(body, &opts); err != nil {
			return nil, 0, badRequest("the body is not DeleteOptions: %v", err)
		}
	}
	m := meta(obj)
	if pre := opts.Preconditions; pre != nil {
		if pre.UID != "" && pre.UID != m["uid"] {
			return nil, 0, conflict(kind, name, fmt.Sprintf("Precondition failed: UID in precondition: %s, UID in object meta: %s", pre.UID, m["uid"]))
		}
		if pre.ResourceVersion != "" && pre.ResourceVersion != m["resourceVersion"] {
			return nil, 0, conflict(kind, name, fmt.Sprintf("Precondition failed: ResourceVersion in precondition: %s, ResourceVersion in object meta: %s", pre.ResourceVersion, m["resourceVersion"]))
		}
	}
	delete(st.objects, k)
	st.rv++
	gone := clone(obj)
	meta(gone)["resourceVersion"] = fmt.Sprint(st.rv)
	st.record(change{resource: k.resource, ns: ns, typ: k8sapi.Deleted, obj: gone})
	return object{"kind": "Status", "apiVersion": "v1", "status": "Success",
		"details": object{"name": name, "kind": kind.Resource, "uid": m["uid"]}}, http.StatusOK, nil
}

// prepare sets what the API server sets on an object being written (old
// is the object it replaces, nil for a create), and validates it.
func (st *store) prepare(kind k8sapi.Kind, obj, old object) *apiError {
	obj["apiVersion"], obj["kind"] = kind.APIVersion(), kind.Name
	compact(obj)
	if kind == k8sapi.KindService {
		return st.prepareService(obj, old)
	}
	return nil
}

// prepareService defaults and validates a Service as the API server does,
// for the fields k8sapi.Service carries.
func (st *store) prepareService(obj, old object) *apiError {
	name, _ := meta(obj)["name"].(string)
	if !isDNSLabel(name) {
		return invalid(k8sapi.KindService, name, "metadata.name: Invalid value: %q: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character", name)
	}
	spec, _ := obj["spec"].(object)
	if spec == nil {
		spec = object{}
		obj["spec"] = spec
	}
	if spec["type"] == nil {
		spec["type"] = k8sapi.ServiceClusterIP
	}
	if spec["type"] != k8sapi.ServiceExternalName {
		var was any
		if old != nil {
			was = old["spec"].(object)["clusterIP"]
		}
		switch ip := spec["clusterIP"]; {
		case ip == nil && was != nil:
			spec["clusterIP"] = was
		case ip == nil:
			st.clusterIP++
			spec["clusterIP"] = fmt.Sprintf("10.96.%d.%d", st.clusterIP/250, st.clusterIP%250+1)
		case was != nil && ip != was:
			return invalid(k8sapi.KindService, name, "spec.clusterIP: Invalid value: %v: field is immutable", ip)
		}
	}
	ports, _ := spec["ports"].([]any)
	for i, p := range ports {
		port, ok := p.(object)
		if !ok {
			return invalid(k8sapi.KindService, name, "spec.ports[%d]: not an object", i)
		}
		n, ok := port["port"].(float64)
		if !ok || n < 1 || n > 65535 || n != float64(int(n)) {
			return invalid(k8sapi.KindService, name, "spec.ports[%d].port: Invalid value: %v: must be between 1 and 65535, inclusive", i, port["port"])
		}
		if pn, _ := port["name"].(string); pn == "" && len(ports) > 1 {
			return invalid(k8sapi.KindService, name, "spec.ports[%d].name: Required value", i)
		}
		if port["protocol"] == nil {
			port["protocol"] = "TCP"
		}
		if port["targetPort"] == nil {
			port["targetPort"] = n
		}
	}
	return nil
}

// isDNSLabel reports whether s is a DNS-1035 label.
func isDNSLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] < 'a' || s[0] > 'z' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// decodeObject reads a request body holding one object.
func decodeObject(body []byte) (object, *apiError) {
	var obj object
	if err := json.Unmarshal(body, &obj); err != nil || obj == nil {
		return nil, badRequest("the body is not a JSON object: %v", err)
	}
	return obj, nil
}

// meta returns the metadata of obj, adding an empty one if it has none.
func meta(obj object) object {
	m, ok := obj["metadata"].(object)
	if !ok {
		m = object{}
		obj["metadata"] = m
	}
	return m
}

// labelsOf returns the labels of obj.
func labelsOf(obj object) map[string]string {
	out := map[string]string{}
	labels, _ := meta(obj)["labels"].(object)
	for k, v := range labels {
		out[k], _ = v.(string)
	}
	return out
}

// clone returns a deep copy of a decoded JSON value.
func clone[T any](v T) T {
	c, _ := cloneValue(v).(T) // only a nil any fails the assertion, and stays nil
	return c
}

func cloneValue(v any) any {
	switch v := v.(type) {
	case object:
		if v == nil {
			return v
		}
		m := make(object, len(v))
		for k, x := range v {
			m[k] = cloneValue(x)
		}
		return m
	case []any:
		s := make([]any, len(v))
		for i, x := range v {
			s[i] = cloneValue(x)
		}
		return s
	}
	return v
}

// compact drops the nulls and empty objects below v, as the API server
// does by decoding into typed objects whose fields are omitted when empty.
func compact(v any) {
	switch v := v.(type) {
	case object:
		for k, x := range v {
			compact(x)
			if m, ok := x.(object); x == nil || ok && len(m) == 0 {
				delete(v, k)
			}
		}
	case []any:
		for _, x := range v {
			compact(x)
		}
	}
}

// parseVersion reads a resourceVersion sent by a client.
func parseVersion(rv string) (int64, bool) {
	n, err := strconv.ParseInt(rv, 10, 64)
	return n, err == nil && n >= 0
}
