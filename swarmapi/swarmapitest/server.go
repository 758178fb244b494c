// Package swarmapitest provides an in-process Docker Engine for tests of
// code written on swarmapi, in the manner of net/http/httptest. A Server
// listens on a unix socket, as dockerd does, and answers the Engine API
// calls swarmapi makes, as a manager of a one-node swarm: version
// negotiation, the swarm's state, services (created, inspected with their
// spec exactly as stored, updated at a version — an update at another
// answers "update out of sequence" —, removed), their tasks, networks,
// images, the tasks' containers, and service events.
//
// A small orchestrator stands in for the swarm's: after every change, each
// service runs as many tasks as its mode asks on the one node (a global
// service one, if its placement constraints admit the node), started at
// once and running, or rejected at once when the engine has not its image
// (AddImage). A task whose template no longer matches its service's is
// shut down and replaced, as a rolling update would; tasks ended by the
// test (EndTask) are replaced unless the restart policy says "none". A
// removed service's tasks are gone with it.
//
// Faults are injected per request (Inject: answer the Nth matching request
// with a status, or act just before it), and for the whole engine
// (SetDown: every connection dropped without an answer, event streams
// cut; SetSwarm: a node that is not a manager answers 503).
package swarmapitest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"plug/swarmapi"
	"plug/tunnel/tunneltest/faults"
)

// Server is an in-process Docker Engine. Its methods are safe for
// concurrent use, also while requests are being served.
type Server struct {
	// Socket is the path of the unix socket the engine listens on.
	Socket string
	// NodeID is the ID of the swarm's one node, a manager.
	NodeID string

	http   *httptest.Server
	dir    string
	faults faults.Injector[Request]

	mu      sync.Mutex
	engine  engine
	version swarmapi.Version
	swarm   swarmapi.SwarmInfo
	streams []chan swarmapi.Event // the open event streams
	kept    []swarmapi.Event      // the last streamBuffer events, oldest first

	closed context.Context // ends with Close
	close  context.CancelFunc
}

// Request is a request the engine received.
type Request struct {
	Op   string // e.g. "service.update", "task.list", "events"; see On
	ID   string // the ID or name the path gives, if any
	Name string // the name of the object concerned, when the engine knows it
	Body []byte // as sent
}

func (r Request) String() string {
	if r.Name != "" {
		return r.Op + " " + r.Name
	}
	return r.Op
}

// NewServer starts an engine of Docker 20.10.24 (API 1.41), a manager of
// its own swarm holding the ingress network alone. The caller must Close
// it.
func NewServer() *Server {
	// A short directory: a unix socket's path has at most 104 bytes on
	// some systems, and a test's temporary directories are long.
	dir, err := os.MkdirTemp("", "swarmapitest")
	if err != nil {
		panic(fmt.Sprintf("swarmapitest: %v", err))
	}
	sock := filepath.Join(dir, "docker.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		os.RemoveAll(dir)
		panic(fmt.Sprintf("swarmapitest: listening on %s: %v", sock, err))
	}
	s := &Server{Socket: sock, dir: dir}
	s.closed, s.close = context.WithCancel(context.Background())
	s.engine.init()
	s.NodeID = s.engine.node.id
	s.version = swarmapi.Version{Version: "20.10.24", APIVersion: "1.41", MinAPIVersion: "1.12", Os: "linux", Arch: "amd64"}
	s.swarm = swarmapi.SwarmInfo{NodeID: s.NodeID, NodeAddr: "127.0.0.1", LocalNodeState: "active", ControlAvailable: true}
	s.http = &httptest.Server{Listener: l, Config: &http.Server{Handler: http.HandlerFunc(s.serveHTTP)}}
	s.http.Start()
	return s
}

// Close ends every event stream and shuts the engine down, blocking until
// every request has completed.
func (s *Server) Close() {
	s.close()
	s.http.Close()
	os.RemoveAll(s.dir)
}

// Client returns a new swarmapi client of the engine.
func (s *Server) Client() *swarmapi.Client { return swarmapi.NewClient(s.Socket) }

// Requests returns every request the engine has received, oldest first,
// answered or not. As dockerd's, an event stream follows the events only
// once the engine has answered it: what happens while its request is on
// its way (as in a Fault's Before) reaches it only if it asked for the
// events since a moment before.
func (s *Server) Requests() []Request { return s.faults.Requests() }

// Fault changes how the engine answers some requests (see faults.Fault): a
// Code is answered with the engine's {"message": ...} body.
type Fault = faults.Fault[Request]

// Injection is a Fault in effect: Applied counts the requests it applied
// to, Remove ends it.
type Injection = faults.Injection[Request]

// Inject puts f into effect from the next request on, until removed.
// When several faults apply to a request, the first injected decides.
func (s *Server) Inject(f Fault) *Injection { return s.faults.Inject(f) }

// On returns a Fault.Match selecting the requests of op concerning the
// object called (or with the ID) name; an empty argument matches any.
func On(op, name string) func(Request) bool {
	return func(r Request) bool {
		return (op == "" || r.Op == op) && (name == "" || r.Name == name || r.ID == name)
	}
}

// SetDown starts (down true) or ends an outage, as when dockerd restarts:
// during it every request, and every event stream that was open when it
// began, ends with its connection closed and no answer. Nothing is lost.
func (s *Server) SetDown(down bool) { s.faults.SetDown(down) }

// apiError is a failed answer: the status and the engine's message.
type apiError struct {
	status  int
	message string
}

func errorf(status int, format string, args ...any) *apiError {
	return &apiError{status, fmt.Sprintf(format, args...)}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.status, map[string]string{"message": e.message})
}

// serveHTTP answers one request: its API version is checked, it is
// recorded, the Before of a fault that applies runs, then it is dropped
// during an outage, answered by the fault, or served.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		return
	}
	path, aerr := s.unversioned(r.URL.Path)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	rt, ok := route(r.Method, path)
	if !ok {
		writeError(w, errorf(http.StatusNotFound, "page not found"))
		return
	}
	req := Request{Op: rt.op, ID: rt.id, Body: body}
	s.mu.Lock()
	req.Name = s.engine.nameOf(rt, body)
	s.mu.Unlock()
	drop, code := s.faults.Admit(req)
	if drop {
		panic(http.ErrAbortHandler) // the connection is closed without an answer
	}
	if code != 0 {
		writeError(w, errorf(code, "injected by the test: %s answered %d %s", req, code, http.StatusText(code)))
		return
	}
	if rt.op == "events" {
		s.events(w, r)
		return
	}
	out, status, aerr := s.answer(rt, r, body)
	switch {
	case aerr != nil:
		writeError(w, aerr)
	case out == nil:
		w.WriteHeader(status)
	default:
		writeJSON(w, status, out)
	}
}

// unversioned strips the /vX.Y prefix of path, refusing a version the
// engine does not speak, as dockerd does.
func (s *Server) unversioned(path string) (string, *apiError) {
	v, rest, ok := strings.Cut(strings.TrimPrefix(path, "/v"), "/")
	if !strings.HasPrefix(path, "/v") || !ok || !strings.Contains(v, ".") {
		return path, nil
	}
	s.mu.Lock()
	ver := s.version
	s.mu.Unlock()
	switch {
	case compareVersions(v, ver.APIVersion) > 0:
		return "", errorf(http.StatusBadRequest, "client version %s is too new. Maximum supported API version is %s", v, ver.APIVersion)
	case ver.MinAPIVersion != "" && compareVersions(v, ver.MinAPIVersion) < 0:
		return "", errorf(http.StatusBadRequest, "client version %s is too old. Minimum supported API version is %s, please upgrade your client to a newer version", v, ver.MinAPIVersion)
	}
	return "/" + rest, nil
}

// compareVersions compares API versions "1.41" numerically.
func compareVersions(a, b string) int {
	var a1, a2, b1, b2 int
	fmt.Sscanf(a, "%d.%d", &a1, &a2)
	fmt.Sscanf(b, "%d.%d", &b1, &b2)
	switch {
	case a1 != b1:
		return a1 - b1
	}
	return a2 - b2
}

// target is what a request's path names.
type target struct {
	op string
	id string
}

// route reads the operation of a request from its method and its path
// without the version prefix.
func route(method, path string) (target, bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	get := method == http.MethodGet
	switch {
	case get && path == "/version":
		return target{op: "version"}, true
	case get && path == "/info":
		return target{op: "info"}, true
	case get && path == "/events":
		return target{op: "events"}, true
	case method == http.MethodPost && path == "/services/create":
		return target{op: "service.create"}, true
	case method == http.MethodPost && len(parts) == 3 && parts[0] == "services" && parts[2] == "update":
		return target{op: "service.update", id: parts[1]}, true
	case method == http.MethodDelete && len(parts) == 2 && parts[0] == "services":
		return target{op: "service.remove", id: parts[1]}, true
	case get && len(parts) == 3 && parts[0] == "containers" && parts[2] == "json":
		return target{op: "container.inspect", id: parts[1]}, true
	case get && len(parts) >= 3 && parts[0] == "images" && parts[len(parts)-1] == "json":
		return target{op: "image.inspect", id: strings.Join(parts[1:len(parts)-1], "/")}, true
	case get && len(parts) == 1 && (parts[0] == "services" || parts[0] == "tasks" || parts[0] == "networks"):
		return target{op: strings.TrimSuffix(parts[0], "s") + ".list"}, true
	case get && len(parts) == 2 && (parts[0] == "services" || parts[0] == "tasks" || parts[0] == "networks"):
		return target{op: strings.TrimSuffix(parts[0], "s") + ".inspect", id: parts[1]}, true
	}
	return target{}, false
}

// answer serves a request that is not an event stream.
func (s *Server) answer(rt target, r *http.Request, body []byte) (any, int, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch rt.op {
	case "version":
		return s.version, http.StatusOK, nil
	case "info":
		return swarmapi.Info{ID: "ENGINE:" + s.NodeID, Name: s.engine.node.hostname, ServerVersion: s.version.Version, Swarm: s.swarm}, http.StatusOK, nil
	case "container.inspect":
		return s.engine.container(rt.id)
	case "image.inspect":
		return s.engine.image(rt.id)
	}
	if strings.HasPrefix(rt.op, "service.") || strings.HasPrefix(rt.op, "task.") || strings.HasPrefix(rt.op, "network.") {
		if !s.swarm.ControlAvailable {
			return nil, 0, errorf(http.StatusServiceUnavailable, "This node is not a swarm manager. Worker nodes can't be used to view or modify cluster state. Please run this command on a manager node or promote the current node to a manager.")
		}
	}
	filter, aerr := parseFilters(r.URL.Query().Get("filters"))
	if aerr != nil {
		return nil, 0, aerr
	}
	e := &s.engine
	switch rt.op {
	case "service.list":
		return e.listServices(filter), http.StatusOK, nil
	case "service.inspect":
		svc, aerr := e.service(rt.id)
		if aerr != nil {
			return nil, 0, aerr
		}
		return e.view(svc), http.StatusOK, nil
	case "service.create":
		id, aerr := e.createService(body)
		if aerr != nil {
			return nil, 0, aerr
		}
		s.publish(e.event("create", id))
		return map[string]any{"ID": id}, http.StatusCreated, nil
	case "service.update":
		if aerr := e.updateService(rt.id, r.URL.Query().Get("version"), body); aerr != nil {
			return nil, 0, aerr
		}
		svc, _ := e.service(rt.id)
		s.publish(e.event("update", svc.id))
		return map[string]any{"Warnings": nil}, http.StatusOK, nil
	case "service.remove":
		svc, aerr := e.service(rt.id)
		if aerr != nil {
			return nil, 0, aerr
		}
		ev := e.event("remove", svc.id)
		e.removeService(svc)
		s.publish(ev)
		return nil, http.StatusOK, nil
	case "task.list":
		return e.listTasks(filter), http.StatusOK, nil
	case "task.inspect":
		return e.task(rt.id)
	case "network.list":
		return e.listNetworks(filter), http.StatusOK, nil
	case "network.inspect":
		return e.network(rt.id)
	}
	return nil, 0, errorf(http.StatusNotFound, "page not found")
}
