package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"plug/tunnel"
)

// maxBody bounds the body of a change.
const maxBody = 8 << 10

// events streams the page's state as server-sent events, one "state"
// event at each change, until the page goes.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "plug ui: streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	states, cancel := s.hub.subscribe()
	defer cancel()
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	fmt.Fprint(w, ": plug ui\n\n")
	flusher.Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case b := <-states:
			fmt.Fprintf(w, "event: state\ndata: %s\n\n", b)
		case <-keepalive.C:
			fmt.Fprint(w, ": keepalive\n\n")
		}
		flusher.Flush()
	}
}

// answer writes v as the JSON answer of a request, or err as its error.
func answer(w http.ResponseWriter, v any, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		w.WriteHeader(http.StatusConflict)
		v = map[string]string{"error": err.Error()}
	}
	json.NewEncoder(w).Encode(v)
}

// readBody reads a change's JSON body into v; a body that is not one
// is answered as a bad request.
func readBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		http.Error(w, "plug ui: the change is not the JSON the page sends: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

// ask bounds one question to the agent made for a request.
func ask(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), time.Minute)
}

// end ends a run (plug end), for a reason.
func (s *Server) end(w http.ResponseWriter, r *http.Request) {
	var q struct{ Run, Reason string }
	if !readBody(w, r, &q) {
		return
	}
	ctx, cancel := ask(r)
	defer cancel()
	ended, err := s.agent.End(ctx, q.Run, q.Reason)
	s.hub.refresh()
	answer(w, map[string]string{"done": fmt.Sprintf("ended run %s of %s (%s)", ended.Run, ended.User, ended.Key)}, err)
}

// members accepts, refuses or removes a key (plug members).
func (s *Server) members(w http.ResponseWriter, r *http.Request) {
	var q struct{ Op, Key, Reason string }
	if !readBody(w, r, &q) {
		return
	}
	if q.Op == "list" {
		http.Error(w, "plug ui: the page lists the members itself", http.StatusBadRequest)
		return
	}
	ctx, cancel := ask(r)
	defer cancel()
	_, done, err := s.agent.Members(ctx, q.Op, q.Key, q.Reason)
	s.hub.refresh()
	answer(w, map[string]string{"done": done}, err)
}

// audit searches the audit trail the cluster keeps.
func (s *Server) audit(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	q := tunnel.AuditQuery{Name: v.Get("name"), User: v.Get("user"), Key: v.Get("key")}
	for _, t := range []struct {
		field string
		to    *time.Time
	}{{"since", &q.Since}, {"until", &q.Until}} {
		if s := v.Get(t.field); s != "" {
			when, err := time.Parse(time.RFC3339, s)
			if err != nil {
				http.Error(w, "plug ui: "+t.field+" is not a time (RFC 3339)", http.StatusBadRequest)
				return
			}
			*t.to = when
		}
	}
	ctx, cancel := ask(r)
	defer cancel()
	events, err := s.agent.SearchAudit(ctx, q)
	if events == nil {
		events = []tunnel.AuditEvent{}
	}
	answer(w, map[string]any{"events": events}, err)
}
