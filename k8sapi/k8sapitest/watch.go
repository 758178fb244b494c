package k8sapitest

import (
	"encoding/json"
	"fmt"
	"net/http"

	"plug/k8sapi"
)

// watchEvent is one line of a watch's answer.
type watchEvent struct {
	Type   k8sapi.EventType `json:"type"`
	Object any              `json:"object"`
}

// watch streams the changes of the objects rt names that the request's
// label selector selects, from its resourceVersion on ("" or "0": every
// current object as ADDED first), until the client goes, the server ends
// the watch, or an outage drops it. An object that a change moves out of
// the selection is seen DELETED, one moved into it ADDED.
func (s *Server) watch(w http.ResponseWriter, r *http.Request, rt target) {
	q := r.URL.Query()
	sel, aerr := listSelector(q)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	s.mu.Lock()
	st := &s.store
	from, pending, aerr := st.watchStart(rt.kind, rt.ns, q.Get("resourceVersion"), sel)
	ended := s.ended
	s.mu.Unlock()
	cut := s.faults.Cut()
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	flusher, _ := w.(http.Flusher)
	resource := keyOf(rt.kind, rt.ns, "").resource
	for {
		for _, ev := range pending {
			if enc.Encode(ev) != nil {
				return
			}
		}
		if flusher != nil {
			flusher.Flush()
		}
		s.mu.Lock()
		changed := st.changed
		var expired *watchEvent
		pending, from, expired = st.since(resource, rt.ns, from, sel)
		s.mu.Unlock()
		if expired != nil {
			enc.Encode(expired)
			return
		}
		if len(pending) > 0 {
			continue
		}
		select {
		case <-changed:
		case <-cut:
			panic(http.ErrAbortHandler)
		case <-ended:
			return
		case <-s.closed.Done():
			return
		case <-r.Context().Done():
			return
		}
	}
}

// watchStart checks where a watch of kind in ns starts and returns the
// resourceVersion it has seen, with the events it sends first.
func (st *store) watchStart(kind k8sapi.Kind, ns, rv string, sel selector) (int64, []watchEvent, *apiError) {
	if rv == "" || rv == "0" {
		var first []watchEvent
		for _, item := range st.list(kind, ns, sel)["items"].([]any) {
			first = append(first, watchEvent{k8sapi.Added, item})
		}
		return st.rv, first, nil
	}
	from, ok := parseVersion(rv)
	if !ok {
		return 0, nil, badRequest("resourceVersion %q is not a resourceVersion this server gave", rv)
	}
	return from, nil, nil
}

// since returns the events of the changes to resource in ns after
// resourceVersion from that sel sees, and the resourceVersion seen; when
// those changes are forgotten, it returns instead the ERROR event saying
// so.
func (st *store) since(resource, ns string, from int64, sel selector) (events []watchEvent, seen int64, expired *watchEvent) {
	if from < st.forgotten {
		return nil, from, &watchEvent{"ERROR", k8sapi.Status{
			Status: "Failure", Code: http.StatusGone, Reason: k8sapi.ReasonExpired,
			Message: fmt.Sprintf("too old resource version: %d (%d)", from, st.forgotten),
		}}
	}
	for _, c := range st.history {
		if c.rv <= from || c.resource != resource || c.ns != ns {
			continue
		}
		was, is := c.old != nil && sel.matches(c.old), sel.matches(c.obj)
		typ := c.typ
		switch {
		case c.typ != k8sapi.Modified:
			if !is {
				continue
			}
		case was && !is:
			typ = k8sapi.Deleted
		case !was && is:
			typ = k8sapi.Added
		case !is:
			continue
		}
		events = append(events, watchEvent{typ, clone(c.obj)})
	}
	return events, st.rv, nil
}
