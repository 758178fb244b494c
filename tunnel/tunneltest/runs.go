package tunneltest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"plug/tunnel"
	"plug/tunnel/clustertest"
)

// The helpers below drive a tunnel.Platform as the agent does, for the
// tests of the platforms themselves.

// Serve serves b on p, failing t if it cannot.
func Serve(t testing.TB, p tunnel.Platform, b tunnel.Binding) tunnel.Served {
	t.Helper()
	served, err := p.Serve(context.Background(), b)
	if err != nil {
		t.Fatalf("serving %s:%d: %v", b.Name, b.Port, err)
	}
	return served
}

// Release gives b back on p, failing t if it cannot.
func Release(t testing.TB, p tunnel.Platform, b tunnel.Binding) {
	t.Helper()
	if err := p.Release(context.Background(), b); err != nil {
		t.Fatalf("giving %s:%d back: %v", b.Name, b.Port, err)
	}
}

// Maintain runs p.Maintain until the test ends, and fails t if it returns
// an error.
func Maintain(t testing.TB, p tunnel.Platform) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Maintain(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Maintain: %v", err)
		}
	})
}

// Events records what a platform tells a run: set a Binding's Notify to
// its Add. The zero Events is ready to use.
type Events struct {
	mu      sync.Mutex
	list    []tunnel.Event
	changed chan struct{} // closed (and replaced) by each Add
}

// Add records ev.
func (e *Events) Add(ev tunnel.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, ev)
	if e.changed != nil {
		close(e.changed)
		e.changed = nil
	}
}

// Told returns what the run was told so far, path changes left out.
func (e *Events) Told() []tunnel.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(e.list), func(ev tunnel.Event) bool { return ev.Kind == tunnel.EventPathChanged })
}

// Wait waits up to timeout for the run to be told an event of kind whose
// text holds text, and returns the first such; it fails t if none comes.
func (e *Events) Wait(t testing.TB, kind tunnel.EventKind, text string, timeout time.Duration) tunnel.Event {
	t.Helper()
	deadline := time.After(timeout)
	for {
		e.mu.Lock()
		i := slices.IndexFunc(e.list, func(ev tunnel.Event) bool { return ev.Kind == kind && strings.Contains(ev.Text, text) })
		if i >= 0 {
			ev := e.list[i]
			e.mu.Unlock()
			return ev
		}
		if e.changed == nil {
			e.changed = make(chan struct{})
		}
		changed := e.changed
		e.mu.Unlock()
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("after %s, the run was not told a %s saying %q; it was told %+v", timeout, kind, text, e.Told())
			return tunnel.Event{}
		}
	}
}

// NameWatch is a platform's WatchNames running for a test.
type NameWatch struct {
	updates chan []tunnel.ClusterName
	cancel  context.CancelFunc
	done    chan error
}

// WatchNames runs p.WatchNames until Stop or the end of the test.
func WatchNames(t testing.TB, p tunnel.Platform) *NameWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &NameWatch{updates: make(chan []tunnel.ClusterName, 64), cancel: cancel, done: make(chan error, 1)}
	go func() { w.done <- p.WatchNames(ctx, func(n []tunnel.ClusterName) { w.updates <- n }) }()
	t.Cleanup(func() { w.Stop() })
	return w
}

// Next waits up to 5 s for the next set of names WatchNames publishes and
// returns it as "NAME [PORTS]" each, failing t if none comes.
func (w *NameWatch) Next(t testing.TB) []string {
	t.Helper()
	select {
	case names := <-w.updates:
		out := []string{}
		for _, n := range names {
			out = append(out, fmt.Sprintf("%s %v", n.Name, n.Ports))
		}
		return out
	case <-time.After(clustertest.Settle):
		t.Fatalf("WatchNames published nothing new for %v", clustertest.Settle)
		return nil
	}
}

// Stop ends WatchNames and returns what it returned.
func (w *NameWatch) Stop() error {
	w.cancel()
	err, ok := <-w.done
	if ok {
		close(w.done)
	}
	return err
}
