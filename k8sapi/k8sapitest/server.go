// Package k8sapitest provides an in-process Kubernetes API server for
// tests of code written on k8sapi, in the manner of net/http/httptest.
//
// A Server keeps Services, Endpoints, Pods, Secrets and EndpointSlices in
// memory and answers the REST calls k8sapi makes as an API server does:
// create, get, list and watch (with equality label selectors), update,
// merge patch and JSON patch, delete with preconditions, and
// SelfSubjectAccessReviews. Every write moves one resourceVersion shared by
// all objects; a write conditioned on an outdated version is answered 409
// Conflict, and a watch resumed from a version the server no longer
// remembers ends with a 410 Expired ERROR event.
//
// No controller runs: no garbage collector, no EndpointSlice controller, no
// kubelet, and a deleted pod is gone at once. A test writes what those
// would (a pod with its status, a controller's EndpointSlice) itself, and
// reads back exactly what the code under test wrote. Services are
// defaulted and validated as the API server does for the fields k8sapi
// carries: type ClusterIP, an allocated clusterIP that no write may change,
// TCP ports whose targetPort defaults to the port, a name for each port of
// a multi-port Service.
//
// Faults are injected per request (Inject: answer the Nth matching request
// with a status, or act just before it), for the whole server (SetDown:
// an outage, every connection dropped without an answer; EndWatches;
// Compact), and per right (Allow: what RBAC grants, which the
// SelfSubjectAccessReviews report and every request obeys).
package k8sapitest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"

	"plug/k8sapi"
	"plug/tunnel/tunneltest/faults"
)

// Server is an in-process Kubernetes API server. Its methods are safe for
// concurrent use, also while requests are being served.
type Server struct {
	// URL is the server's base URL, "http://127.0.0.1:PORT".
	URL string

	http *httptest.Server

	faults faults.Injector[Request]

	mu    sync.Mutex
	store store
	allow func(k8sapi.ResourceAttributes) bool
	ended chan struct{} // closed (and replaced) to end every open watch

	closed context.Context // ends with Close
	close  context.CancelFunc
}

// The kinds a Server keeps, by their path below /api or /apis.
var kinds = map[string]k8sapi.Kind{}

func init() {
	for _, k := range []k8sapi.Kind{k8sapi.KindService, k8sapi.KindEndpoints, k8sapi.KindPod, k8sapi.KindSecret, k8sapi.KindEndpointSlice,
		k8sapi.KindConfigMap, k8sapi.KindDeployment, k8sapi.KindStatefulSet, k8sapi.KindDaemonSet, k8sapi.KindJob} {
		kinds[k.APIVersion()+"/"+k.Resource] = k
	}
}

// NewServer starts and returns a Server holding no objects. The caller
// must Close it.
func NewServer() *Server {
	s := &Server{ended: make(chan struct{})}
	s.closed, s.close = context.WithCancel(context.Background())
	s.store.init()
	s.http = httptest.NewServer(http.HandlerFunc(s.serveHTTP))
	s.URL = s.http.URL
	return s
}

// Close ends every open watch and shuts the server down, blocking until
// every request has completed.
func (s *Server) Close() {
	s.close()
	s.http.Close()
}

// Client returns a new k8sapi client of the server.
func (s *Server) Client() *k8sapi.Client {
	c, err := k8sapi.New(k8sapi.Config{Server: s.URL})
	if err != nil {
		panic(err) // the URL of an httptest server is always valid
	}
	return c
}

// ResourceVersion is the server's current resourceVersion: it moves on
// with every write that changes an object, and with nothing else.
func (s *Server) ResourceVersion() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprint(s.store.rv)
}

// Request is a request the server received, as RBAC sees it.
type Request struct {
	Verb      string // get, list, watch, create, update, patch or delete
	Group     string // "" for the core group
	Resource  string // e.g. "services", "selfsubjectaccessreviews"
	Namespace string
	Name      string // from the path; for a create, the new object's
	Body      []byte // as sent
}

func (r Request) String() string {
	s := r.Verb + " " + r.Resource
	if r.Name != "" {
		s += "/" + r.Name
	}
	return s
}

// Requests returns every request the server has received, oldest first,
// answered or not.
func (s *Server) Requests() []Request { return s.faults.Requests() }

// Allow makes allowed what RBAC grants from now on: every request whose
// attributes it refuses is answered 403 Forbidden, and
// SelfSubjectAccessReviews report its answer. nil allows everything, as
// when the server starts.
func (s *Server) Allow(allowed func(k8sapi.ResourceAttributes) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.allow = allowed
}

// SetDown starts (down true) or ends an outage. During an outage every
// request, and every watch that was open when it began, ends with its
// connection closed and no answer, as when the API server cannot be
// reached. Nothing is lost: the objects are there again after it.
func (s *Server) SetDown(down bool) { s.faults.SetDown(down) }

// EndWatches ends every open watch normally, as the API server does once a
// watch's timeout has passed; a client resumes from the last
// resourceVersion it saw.
func (s *Server) EndWatches() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.ended)
	s.ended = make(chan struct{})
}

// Compact makes the server forget the history of changes, as etcd's
// compaction does: a watch from any resourceVersion before now ends with a
// 410 Expired ERROR event, and the client must list again. Open watches go
// on.
func (s *Server) Compact() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.store.compact()
}

// serveHTTP answers one request: it is recorded, the Before of a fault
// that applies runs, then it is dropped during an outage, answered by the
// fault, refused by RBAC, or served.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 3<<20))
	if err != nil {
		return
	}
	rt, ok := route(r)
	if !ok {
		writeError(w, errNotFound("the server could not find the requested resource %s", r.URL.Path))
		return
	}
	req := rt.request(r, body)
	drop, code := s.faults.Admit(req)
	if drop {
		panic(http.ErrAbortHandler) // the connection is closed without an answer
	}
	if code != 0 {
		writeError(w, injected(code, req))
		return
	}
	s.mu.Lock()
	allow := s.allow
	s.mu.Unlock()
	if rt.review {
		s.review(w, body, allow)
		return
	}
	attrs := k8sapi.ResourceAttributes{Namespace: req.Namespace, Verb: req.Verb, Group: req.Group, Resource: req.Resource, Name: rt.name}
	if allow != nil && !allow(attrs) {
		writeError(w, forbidden(attrs))
		return
	}
	if req.Verb == "watch" {
		s.watch(w, r, rt)
		return
	}
	obj, code, aerr := s.apply(rt, req, r.Header.Get("Content-Type"), r.URL.Query())
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	writeJSON(w, code, obj)
}

// apply serves a request that is not a watch.
func (s *Server) apply(rt target, req Request, contentType string, q url.Values) (any, int, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &s.store
	switch req.Verb {
	case "get":
		return st.get(rt.kind, rt.ns, rt.name)
	case "list":
		sel, err := listSelector(q)
		if err != nil {
			return nil, 0, err
		}
		return st.list(rt.kind, rt.ns, sel), http.StatusOK, nil
	case "create":
		if q.Get("dryRun") == "All" { // admitted, and nothing stored: there is no admission here
			var obj map[string]any
			json.Unmarshal(req.Body, &obj)
			return obj, http.StatusCreated, nil
		}
		return st.create(rt.kind, rt.ns, req.Body)
	case "update":
		return st.update(rt.kind, rt.ns, rt.name, req.Body)
	case "patch":
		return st.patch(rt.kind, rt.ns, rt.name, contentType, req.Body)
	case "delete":
		return st.remove(rt.kind, rt.ns, rt.name, req.Body)
	}
	return nil, 0, &apiError{http.StatusMethodNotAllowed, "MethodNotAllowed", "the server does not allow this method on the requested resource"}
}

// review answers a SelfSubjectAccessReview with what allow grants.
func (s *Server) review(w http.ResponseWriter, body []byte, allow func(k8sapi.ResourceAttributes) bool) {
	var review map[string]any
	var in struct {
		Spec struct {
			ResourceAttributes k8sapi.ResourceAttributes `json:"resourceAttributes"`
		} `json:"spec"`
	}
	if json.Unmarshal(body, &review) != nil || json.Unmarshal(body, &in) != nil || review == nil {
		writeError(w, badRequest("the body is not a SelfSubjectAccessReview"))
		return
	}
	allowed := allow == nil || allow(in.Spec.ResourceAttributes)
	status := map[string]any{"allowed": allowed}
	if !allowed {
		status["reason"] = "no RBAC rule allows it (k8sapitest)"
	}
	review["status"] = status
	writeJSON(w, http.StatusCreated, review)
}

// target is what a request's path names.
type target struct {
	kind   k8sapi.Kind
	ns     string
	name   string
	review bool // a SelfSubjectAccessReview
}

// route reads the target of r from its path:
// /api/v1/namespaces/NS/RESOURCE[/NAME] or
// /apis/GROUP/VERSION/namespaces/NS/RESOURCE[/NAME].
func route(r *http.Request) (target, bool) {
	if r.URL.Path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" && r.Method == http.MethodPost {
		return target{review: true}, true
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	var gv string
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		gv, parts = parts[1], parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		gv, parts = parts[1]+"/"+parts[2], parts[3:]
	default:
		return target{}, false
	}
	if len(parts) < 3 || len(parts) > 4 || parts[0] != "namespaces" || parts[1] == "" {
		return target{}, false
	}
	kind, ok := kinds[gv+"/"+parts[2]]
	if !ok {
		return target{}, false
	}
	t := target{kind: kind, ns: parts[1]}
	if len(parts) == 4 {
		if parts[3] == "" {
			return target{}, false
		}
		t.name = parts[3]
	}
	return t, true
}

// request is r as RBAC sees it.
func (t target) request(r *http.Request, body []byte) Request {
	if t.review {
		return Request{Verb: "create", Group: "authorization.k8s.io", Resource: "selfsubjectaccessreviews", Body: body}
	}
	req := Request{Group: t.kind.Group, Resource: t.kind.Resource, Namespace: t.ns, Name: t.name, Body: body}
	switch {
	case r.Method == http.MethodGet && t.name != "":
		req.Verb = "get"
	case r.Method == http.MethodGet && r.URL.Query().Get("watch") == "true":
		req.Verb = "watch"
	case r.Method == http.MethodGet:
		req.Verb = "list"
	case r.Method == http.MethodPost && t.name == "":
		req.Verb = "create"
		var obj struct {
			Metadata struct{ Name string } `json:"metadata"`
		}
		json.Unmarshal(body, &obj)
		req.Name = obj.Metadata.Name
	case r.Method == http.MethodPut && t.name != "":
		req.Verb = "update"
	case r.Method == http.MethodPatch && t.name != "":
		req.Verb = "patch"
	case r.Method == http.MethodDelete && t.name != "":
		req.Verb = "delete"
	default:
		req.Verb = strings.ToLower(r.Method)
	}
	return req
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}
