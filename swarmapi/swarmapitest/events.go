package swarmapitest

import (
	"encoding/json"
	"net/http"

	"plug/swarmapi"
)

// streamBuffer is how many events an event stream holds for a client that
// does not read them; more are dropped for that client.
const streamBuffer = 256

// events streams the events published to ch (since the request came)
// that match the request's filters (their "type" only: service events are
// the ones the engine emits here), until the client goes, the engine
// closes, or an outage cuts it.
func (s *Server) events(w http.ResponseWriter, r *http.Request, ch chan swarmapi.Event) {
	f, aerr := parseFilters(r.URL.Query().Get("filters"))
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	cut := s.faults.Cut()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	enc := json.NewEncoder(w)
	for {
		select {
		case ev := <-ch:
			if !f.match("type", equal(ev.Type)) {
				continue
			}
			if enc.Encode(ev) != nil {
				return
			}
			w.(http.Flusher).Flush()
		case <-cut:
			panic(http.ErrAbortHandler)
		case <-s.closed.Done():
			return
		case <-r.Context().Done():
			return
		}
	}
}

func (s *Server) unsubscribe(ch chan swarmapi.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, c := range s.streams {
		if c == ch {
			s.streams = append(s.streams[:i:i], s.streams[i+1:]...)
			return
		}
	}
}

// publish sends ev to every open event stream. s.mu is held.
func (s *Server) publish(ev swarmapi.Event) {
	for _, ch := range s.streams {
		select {
		case ch <- ev:
		default: // a client that does not read loses events, as with dockerd
		}
	}
}
