package clustertest

import (
	"errors"
	"testing"
	"time"
)

// Eventually calls check until it returns nil, and fails t with check's
// last error once within has passed without that; what names the awaited
// state in the failure ("web answers", "the warning told"). It is how every
// test of the module waits: for a condition, with a deadline, never for a
// fixed time.
func Eventually(t testing.TB, within time.Duration, what string, check func() error) {
	t.Helper()
	if err := poll(within, check); err != nil {
		t.Fatalf("%s: still not so after %v: %v", what, within, err)
	}
}

// Until is Eventually for a condition that has nothing to say when it is
// not so: it waits until cond returns true.
func Until(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if poll(within, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	}) != nil {
		t.Fatalf("timed out after %v waiting for %s", within, what)
	}
}

var errNotYet = errors.New("not yet")

// Settle is the deadline of a wait for what plug does not control: a
// cluster programming what it was told (kube-proxy's rules, the kubelet
// starting or stopping a container, dockerd replacing a task, the API
// server's watches, DNS caches), or a machine busy with other work getting
// round to plug's goroutines. Such a wait measures the machine, not plug,
// so it is long: a wait ends as soon as its condition holds, and a test
// logs how long that took where it matters; the latencies a developer
// feels are measured by the benchmark (testdata/bench), not asserted here.
// A wait on a time the docs promise for plug's own part uses that time
// instead, and says which doc line it checks.
const Settle = 60 * time.Second

// Consistently calls check for the whole of d, and fails t at once with
// the first error it returns. It is for what must not happen (a second
// warning, a request nobody made), where no event marks the moment by
// which it would have happened: d is then the time in which it would.
func Consistently(t testing.TB, d time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for interval := firstInterval; ; interval = next(interval) {
		if err := check(); err != nil {
			t.Fatalf("%s: no longer so after %v: %v", what, d-time.Until(deadline).Round(time.Millisecond), err)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		time.Sleep(min(interval, left))
	}
}

// The pause between two checks starts short, for what is quick in
// process, and grows by a quarter each time to maxInterval, for checks
// that ask a cluster: the time a wait took is known to within a fifth.
const (
	firstInterval = 5 * time.Millisecond
	maxInterval   = 250 * time.Millisecond
)

func next(interval time.Duration) time.Duration { return min(interval*5/4, maxInterval) }

// poll calls check until it returns nil or within has passed, and returns
// check's last error in the latter case.
func poll(within time.Duration, check func() error) error {
	deadline := time.Now().Add(within)
	for interval := firstInterval; ; interval = next(interval) {
		err := check()
		if err == nil {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return err
		}
		time.Sleep(min(interval, left))
	}
}
