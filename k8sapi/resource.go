package k8sapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
)

// Kind names a collection of the REST API.
type Kind struct {
	Group    string // "" for the core group
	Version  string
	Resource string // plural, e.g. "services"
	Name     string // the object kind, e.g. "Service"
}

// The kinds plug uses.
var (
	KindService       = Kind{"", "v1", "services", "Service"}
	KindEndpoints     = Kind{"", "v1", "endpoints", "Endpoints"}
	KindPod           = Kind{"", "v1", "pods", "Pod"}
	KindSecret        = Kind{"", "v1", "secrets", "Secret"}
	KindEndpointSlice = Kind{"discovery.k8s.io", "v1", "endpointslices", "EndpointSlice"}
	KindEvent         = Kind{"", "v1", "events", "Event"}
	KindConfigMap     = Kind{"", "v1", "configmaps", "ConfigMap"}
	KindLease         = Kind{"coordination.k8s.io", "v1", "leases", "Lease"}
	KindPVC           = Kind{"", "v1", "persistentvolumeclaims", "PersistentVolumeClaim"}
)

// APIVersion is the kind's "group/version" (or "v1" for core).
func (k Kind) APIVersion() string {
	if k.Group == "" {
		return k.Version
	}
	return k.Group + "/" + k.Version
}

// collectionPath is the escaped path of k's objects in namespace ns.
func (k Kind) collectionPath(ns string) string {
	p := "/apis/" + k.Group + "/" + k.Version
	if k.Group == "" {
		p = "/api/" + k.Version
	}
	return p + "/namespaces/" + url.PathEscape(ns) + "/" + k.Resource
}

// Resource is the objects of one kind in one namespace, decoded as T.
// T is one of this package's types, or map[string]any to see every field.
type Resource[T any] struct {
	c    *Client
	path string
}

// Resources returns kind's objects in namespace ns, decoded as T. The
// Client's accessors below are it for the kinds the agent works on
// throughout; a kind read in one place is reached with Resources itself.
func Resources[T any](c *Client, kind Kind, ns string) Resource[T] {
	return Resource[T]{c: c, path: kind.collectionPath(ns)}
}

// Services are the namespace's Services.
func (c *Client) Services(ns string) Resource[Service] { return Resources[Service](c, KindService, ns) }

// EndpointSlices are the namespace's EndpointSlices.
func (c *Client) EndpointSlices(ns string) Resource[EndpointSlice] {
	return Resources[EndpointSlice](c, KindEndpointSlice, ns)
}

// Pods are the namespace's Pods.
func (c *Client) Pods(ns string) Resource[Pod] { return Resources[Pod](c, KindPod, ns) }

// Secrets are the namespace's Secrets.
func (c *Client) Secrets(ns string) Resource[Secret] { return Resources[Secret](c, KindSecret, ns) }

// Events are the namespace's core/v1 Events.
func (c *Client) Events(ns string) Resource[ObjectEvent] {
	return Resources[ObjectEvent](c, KindEvent, ns)
}

// Leases are the namespace's coordination.k8s.io Leases.
func (c *Client) Leases(ns string) Resource[Lease] { return Resources[Lease](c, KindLease, ns) }

func (r Resource[T]) objectPath(name string) string { return r.path + "/" + url.PathEscape(name) }

// ListOptions select the objects of a list or a watch.
type ListOptions struct {
	LabelSelector   string // e.g. "app.kubernetes.io/managed-by=plug"
	FieldSelector   string // e.g. "metadata.name=web"
	ResourceVersion string // for a watch: where to start
	// Limit, when set, has List read the objects that many at a time, so
	// that no one response of the API server holds them all (a namespace's
	// thousands); List still returns them all.
	Limit int
}

func (o ListOptions) query() url.Values {
	q := url.Values{}
	if o.LabelSelector != "" {
		q.Set("labelSelector", o.LabelSelector)
	}
	if o.FieldSelector != "" {
		q.Set("fieldSelector", o.FieldSelector)
	}
	if o.ResourceVersion != "" {
		q.Set("resourceVersion", o.ResourceVersion)
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	return q
}

// Get reads the object called name.
func (r Resource[T]) Get(ctx context.Context, name string) (*T, error) {
	var out T
	return &out, r.c.do(ctx, request{method: http.MethodGet, path: r.objectPath(name)}, &out)
}

// List reads every object matching opts, following continue tokens.
func (r Resource[T]) List(ctx context.Context, opts ListOptions) (*List[T], error) {
	var all List[T]
	q := opts.query()
	for {
		var page List[T]
		if err := r.c.do(ctx, request{method: http.MethodGet, path: r.path, query: q}, &page); err != nil {
			return nil, err
		}
		all.Items = append(all.Items, page.Items...)
		all.Metadata.ResourceVersion = page.Metadata.ResourceVersion
		if page.Metadata.Continue == "" {
			return &all, nil
		}
		q.Set("continue", page.Metadata.Continue)
	}
}

// Create writes a new object. It fails with AlreadyExists when the name is
// taken.
func (r Resource[T]) Create(ctx context.Context, obj *T) (*T, error) {
	var out T
	return &out, r.c.do(ctx, request{method: http.MethodPost, path: r.path, body: obj}, &out)
}

// CreateDryRun asks whether obj would be created (dryRun=All): the API
// server validates and admits it, and stores nothing. Its error is what
// Create would fail with.
func (r Resource[T]) CreateDryRun(ctx context.Context, obj *T) error {
	return r.c.do(ctx, request{method: http.MethodPost, path: r.path, query: url.Values{"dryRun": {"All"}}, body: obj}, nil)
}

// Update replaces the object called name with obj. When obj carries a
// resourceVersion the write applies only to that version of the object,
// and fails with Conflict otherwise.
func (r Resource[T]) Update(ctx context.Context, name string, obj *T) (*T, error) {
	var out T
	return &out, r.c.do(ctx, request{method: http.MethodPut, path: r.objectPath(name), body: obj}, &out)
}

// Delete removes the object called name, only if it still matches pre
// when pre is not nil (Conflict otherwise). Dependents go in the
// background.
func (r Resource[T]) Delete(ctx context.Context, name string, pre *Preconditions) error {
	body := deleteOptions{
		TypeMeta:          TypeMeta{APIVersion: "v1", Kind: "DeleteOptions"},
		Preconditions:     pre,
		PropagationPolicy: "Background",
	}
	return r.c.do(ctx, request{method: http.MethodDelete, path: r.objectPath(name), body: body}, nil)
}

// MergePatch applies a JSON merge patch (RFC 7386) to the object called
// name. A patch that sets metadata.resourceVersion applies only to that
// version of the object and fails with Conflict otherwise.
func (r Resource[T]) MergePatch(ctx context.Context, name string, patch any) (*T, error) {
	var out T
	req := request{method: http.MethodPatch, path: r.objectPath(name), body: patch, contentType: "application/merge-patch+json"}
	return &out, r.c.do(ctx, req, &out)
}

// PatchOp is one operation of a JSON patch (RFC 6902).
type PatchOp struct {
	Op    string // "add", "remove", "replace", "test"
	Path  string // a JSON pointer; see PointerEscape
	Value any    // sent with every operation but "remove", even when zero
}

// MarshalJSON writes the operation, with "value" unless it is a remove.
func (o PatchOp) MarshalJSON() ([]byte, error) {
	if o.Op == "remove" {
		return json.Marshal(struct {
			Op   string `json:"op"`
			Path string `json:"path"`
		}{o.Op, o.Path})
	}
	return json.Marshal(struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}{o.Op, o.Path, o.Value})
}

// JSONPatch applies a JSON patch (RFC 6902) to the object called name. An
// operation replacing /metadata/resourceVersion makes the patch apply only
// to that version of the object (Conflict otherwise).
func (r Resource[T]) JSONPatch(ctx context.Context, name string, ops []PatchOp) (*T, error) {
	var out T
	req := request{method: http.MethodPatch, path: r.objectPath(name), body: ops, contentType: "application/json-patch+json"}
	return &out, r.c.do(ctx, req, &out)
}
