package tunneltest

import (
	"slices"
	"sync"
	"testing"
	"time"

	"plug/tunnel"
)

// Audit collects an agent's audit trail: pass its Sink as Agent.Audit.
type Audit struct {
	mu     sync.Mutex
	events []tunnel.AuditEvent
	added  chan struct{} // closed and replaced at each event
}

// NewAudit returns an empty audit trail.
func NewAudit() *Audit { return &Audit{added: make(chan struct{})} }

// Sink records e.
func (a *Audit) Sink(e tunnel.AuditEvent) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events = append(a.events, e)
	close(a.added)
	a.added = make(chan struct{})
}

// Events returns the events recorded so far, oldest first; with names
// given, only events of those names.
func (a *Audit) Events(names ...string) []tunnel.AuditEvent {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []tunnel.AuditEvent
	for _, e := range a.events {
		if len(names) == 0 || slices.Contains(names, e.Event) {
			out = append(out, e)
		}
	}
	return out
}

// Await returns the first event for which match holds, waiting for it up
// to timeout; it fails the test if none comes.
func (a *Audit) Await(t testing.TB, timeout time.Duration, what string, match func(tunnel.AuditEvent) bool) tunnel.AuditEvent {
	t.Helper()
	deadline := time.After(timeout)
	for {
		a.mu.Lock()
		for _, e := range a.events {
			if match(e) {
				a.mu.Unlock()
				return e
			}
		}
		added := a.added
		a.mu.Unlock()
		select {
		case <-added:
		case <-deadline:
			t.Fatalf("no audit event %s within %s; the trail: %+v", what, timeout, a.Events())
			return tunnel.AuditEvent{}
		}
	}
}
