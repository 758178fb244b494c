package k8sapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// EventType is what happened to an object in a watch.
type EventType string

// Event types of a watch.
const (
	Added    EventType = "ADDED"
	Modified EventType = "MODIFIED"
	Deleted  EventType = "DELETED"
	Bookmark EventType = "BOOKMARK" // only moves the resourceVersion on
	errorEvt EventType = "ERROR"
)

// Event is one change seen by a watch.
type Event[T any] struct {
	Type            EventType
	Object          T
	ResourceVersion string // the object's, where a resumed watch starts
}

// Watcher reads the events of one watch request.
type Watcher[T any] struct {
	body io.ReadCloser
	dec  *json.Decoder
	path string
}

// Watch starts watching the objects matching opts from
// opts.ResourceVersion. The server ends a watch after a while; resume it
// with a new Watch from the last ResourceVersion seen, or use Follow.
func (r Resource[T]) Watch(ctx context.Context, opts ListOptions) (*Watcher[T], error) {
	q := opts.query()
	q.Set("watch", "true")
	q.Set("allowWatchBookmarks", "true")
	resp, err := r.c.send(ctx, request{method: http.MethodGet, path: r.path, query: q})
	if err != nil {
		return nil, err
	}
	return &Watcher[T]{body: resp.Body, dec: json.NewDecoder(resp.Body), path: r.path}, nil
}

// Next returns the next event. It returns io.EOF when the server ended the
// watch, and an *APIError when the server sent an ERROR event (IsGone: the
// resourceVersion is too old, list again).
func (w *Watcher[T]) Next() (Event[T], error) {
	var raw struct {
		Type   EventType       `json:"type"`
		Object json.RawMessage `json:"object"`
	}
	if err := w.dec.Decode(&raw); err != nil {
		return Event[T]{}, err
	}
	if raw.Type == errorEvt {
		var st Status
		if err := json.Unmarshal(raw.Object, &st); err != nil {
			return Event[T]{}, fmt.Errorf("kubernetes API WATCH %s: undecodable ERROR event: %w", w.path, err)
		}
		e := &APIError{Method: "WATCH", Path: w.path, Code: st.Code, Reason: st.Reason, Text: st.Message}
		if e.Reason == "" {
			e.Reason = reasonFor(st.Code)
		}
		return Event[T]{}, e
	}
	ev := Event[T]{Type: raw.Type}
	var meta struct {
		Metadata ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(raw.Object, &meta); err != nil {
		return Event[T]{}, fmt.Errorf("kubernetes API WATCH %s: undecodable event: %w", w.path, err)
	}
	ev.ResourceVersion = meta.Metadata.ResourceVersion
	if raw.Type != Bookmark {
		if err := json.Unmarshal(raw.Object, &ev.Object); err != nil {
			return Event[T]{}, fmt.Errorf("kubernetes API WATCH %s: undecodable %s event: %w", w.path, raw.Type, err)
		}
	}
	return ev, nil
}

// Close ends the watch.
func (w *Watcher[T]) Close() error { return w.body.Close() }

// Handler receives what Follow sees.
type Handler[T any] struct {
	// Synced receives every matching object after each list: at the start
	// and again whenever the watch could not be resumed.
	Synced func(items []T)
	// Changed receives each change after that. Bookmarks are not passed on.
	Changed func(ev Event[T])
}

// Follow keeps h up to date with the objects matching opts until ctx ends:
// it lists them, then watches from the list's resourceVersion. A watch the
// server ends is resumed from the last resourceVersion seen; one that can
// no longer be resumed (410 Gone) lists again. Failures to reach the server
// are retried with a growing pause (up to retryMax). Follow returns
// ctx.Err() when ctx ends, or at once an error that retrying cannot fix
// (Forbidden, Unauthorized, NotFound).
func (r Resource[T]) Follow(ctx context.Context, opts ListOptions, retryMax time.Duration, h Handler[T]) error {
	pause := min(100*time.Millisecond, retryMax)
	rv := ""
	for ctx.Err() == nil {
		var err error
		if rv == "" {
			rv, err = r.relist(ctx, opts, h)
		} else {
			rv, err = r.watchFrom(ctx, opts, rv, h)
		}
		switch {
		case ctx.Err() != nil:
		case err == nil:
			pause = min(100*time.Millisecond, retryMax)
			continue
		case IsGone(err):
			rv = ""
			continue
		case IsForbidden(err) || reasonIs(err, ReasonUnauthorized, ReasonNotFound):
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		pause = min(pause*2, retryMax)
	}
	return ctx.Err()
}

// relist lists, hands the items to h.Synced and returns where to watch from.
func (r Resource[T]) relist(ctx context.Context, opts ListOptions, h Handler[T]) (string, error) {
	opts.ResourceVersion = ""
	list, err := r.List(ctx, opts)
	if err != nil {
		return "", err
	}
	if h.Synced != nil {
		h.Synced(list.Items)
	}
	return list.Metadata.ResourceVersion, nil
}

// watchFrom watches from rv until the watch ends and returns the last
// resourceVersion seen. It returns a nil error when the server ended the
// watch normally.
func (r Resource[T]) watchFrom(ctx context.Context, opts ListOptions, rv string, h Handler[T]) (string, error) {
	opts.ResourceVersion = rv
	w, err := r.Watch(ctx, opts)
	if err != nil {
		return rv, err
	}
	defer w.Close()
	for {
		ev, err := w.Next()
		if errors.Is(err, io.EOF) {
			return rv, nil
		}
		if err != nil {
			return rv, err
		}
		if ev.ResourceVersion != "" {
			rv = ev.ResourceVersion
		}
		if ev.Type != Bookmark && h.Changed != nil {
			h.Changed(ev)
		}
	}
}
