package swarmapitest

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"plug/swarmapi"
)

// streamBuffer is how many events an event stream holds for a client that
// does not read them; more are dropped for that client.
const streamBuffer = 256

// events streams the events that match the request's filters (their
// "type" only: service events are the ones the engine emits here), until
// the client goes, the engine closes, or an outage cuts it. As dockerd, it
// answers first and only then follows the events, beginning with those
// kept from the request's since on.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	f, aerr := parseFilters(r.URL.Query().Get("filters"))
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	cut := s.faults.Cut()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	s.mu.Lock()
	ch := s.subscribe(r.URL.Query().Get("since"))
	s.mu.Unlock()
	defer s.unsubscribe(ch)
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

// subscribe opens an event stream that holds first the kept events from
// since on ("seconds.nanoseconds", as the engine's query reads it; empty
// for none). s.mu is held.
func (s *Server) subscribe(since string) chan swarmapi.Event {
	ch := make(chan swarmapi.Event, streamBuffer)
	if from, ok := parseSince(since); ok {
		for _, ev := range s.kept {
			if ev.TimeNano >= from {
				ch <- ev
			}
		}
	}
	s.streams = append(s.streams, ch)
	return ch
}

// parseSince reads "seconds[.nanoseconds]" as nanoseconds since 1970.
func parseSince(since string) (int64, bool) {
	secs, frac, _ := strings.Cut(since, ".")
	sec, err := strconv.ParseInt(secs, 10, 64)
	if err != nil {
		return 0, false
	}
	nsec, err := strconv.ParseInt((frac + "000000000")[:9], 10, 64)
	if err != nil {
		return 0, false
	}
	return sec*1e9 + nsec, true
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

// publish stamps ev with the time, keeps it, and sends it to every open
// event stream. s.mu is held.
func (s *Server) publish(ev swarmapi.Event) {
	ev.TimeNano = time.Now().UnixNano()
	s.kept = append(s.kept[max(0, len(s.kept)+1-streamBuffer):], ev)
	for _, ch := range s.streams {
		select {
		case ch <- ev:
		default: // a client that does not read loses events, as with dockerd
		}
	}
}
