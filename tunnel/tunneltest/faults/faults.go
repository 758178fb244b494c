// Package faults is the request side of plug's in-process fake servers
// (k8sapi/k8sapitest, swarmapi/swarmapitest): it records every request a
// fake receives, decides which of the faults a test injected apply to it,
// and holds the outages a test starts. A fake defines its own request type
// R, saying what a fault can select a request by.
package faults

import (
	"fmt"
	"sync"
)

// A Fault changes how a fake server answers some requests.
type Fault[R any] struct {
	// Match selects the requests the fault concerns; nil selects every
	// request.
	Match func(R) bool
	// Skip is how many matching requests are served as usual before the
	// fault applies.
	Skip int
	// Times is how many matching requests, after those skipped, the fault
	// applies to; 0 means every one, until the fault is removed.
	Times int
	// Code, when not 0, is the HTTP status each request the fault applies
	// to is answered with instead of being served; the fake writes the
	// body its real server gives with that status.
	Code int
	// Before, when set, runs first thing for each request the fault
	// applies to, with no lock of the server held: it may make requests of
	// its own (e.g. the write of another client that the request then
	// conflicts with), or start an outage that drops the request itself.
	Before func(R)
}

// Injection is a Fault in effect.
type Injection[R any] struct {
	f       Fault[R]
	in      *Injector[R]
	seen    int // matching requests so far
	applied int
}

// Applied is how many requests the fault has applied to so far.
func (inj *Injection[R]) Applied() int {
	inj.in.mu.Lock()
	defer inj.in.mu.Unlock()
	return inj.applied
}

// Remove takes the fault out of effect.
func (inj *Injection[R]) Remove() {
	inj.in.mu.Lock()
	defer inj.in.mu.Unlock()
	for i, f := range inj.in.faults {
		if f == inj {
			inj.in.faults = append(inj.in.faults[:i:i], inj.in.faults[i+1:]...)
			return
		}
	}
}

// Injector holds the faults and outages of one fake server, and the
// requests it received. The zero Injector has no fault and no outage. It
// is safe for concurrent use.
type Injector[R any] struct {
	mu       sync.Mutex
	faults   []*Injection[R]
	requests []R
	down     bool
	cut      chan struct{} // closed when an outage starts
}

// Inject puts f into effect from the next request on, until removed. When
// several faults apply to a request, the first injected decides; each
// counts the request all the same.
func (in *Injector[R]) Inject(f Fault[R]) *Injection[R] {
	in.mu.Lock()
	defer in.mu.Unlock()
	inj := &Injection[R]{f: f, in: in}
	in.faults = append(in.faults, inj)
	return inj
}

// SetDown starts (down true) or ends an outage: while one is on, every
// request is dropped without an answer, and the streams being served when
// it starts are cut (see Cut).
func (in *Injector[R]) SetDown(down bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if down && !in.down && in.cut != nil {
		close(in.cut)
		in.cut = nil
	}
	in.down = down
}

// Cut returns a channel closed when the next outage starts: a stream (a
// watch, an event stream) being served must then end without a proper
// end, as when the server cannot be reached.
func (in *Injector[R]) Cut() <-chan struct{} {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cut == nil {
		in.cut = make(chan struct{})
	}
	return in.cut
}

// Requests returns every request received so far, oldest first, answered
// or not.
func (in *Injector[R]) Requests() []R {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]R(nil), in.requests...)
}

// Admit records req, runs the Before of the fault that applies to it, if
// any, and then says how the fake answers it: not at all, dropping the
// connection, because an outage is on (drop); with the status code of the
// fault (code, when not 0); or as usual.
func (in *Injector[R]) Admit(req R) (drop bool, code int) {
	in.mu.Lock()
	in.requests = append(in.requests, req)
	var found *Injection[R]
	for _, inj := range in.faults {
		if inj.f.Match != nil && !inj.f.Match(req) {
			continue
		}
		inj.seen++
		n := inj.seen - inj.f.Skip
		if found != nil || n <= 0 || (inj.f.Times > 0 && n > inj.f.Times) {
			continue
		}
		inj.applied++
		found = inj
	}
	in.mu.Unlock()
	if found != nil && found.f.Before != nil {
		found.f.Before(req)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.down {
		return true, 0
	}
	if found != nil {
		return false, found.f.Code
	}
	return false, 0
}

// Count is how many of reqs are req, as their String methods write them
// (e.g. "patch services/web").
func Count[R fmt.Stringer](reqs []R, req string) int {
	n := 0
	for _, r := range reqs {
		if r.String() == req {
			n++
		}
	}
	return n
}
