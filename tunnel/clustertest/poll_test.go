package clustertest

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// recorded runs f with a stopRecorder and tells how f stopped the test.
func recorded(t *testing.T, f func(testing.TB)) *stopRecorder {
	r := &stopRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

func TestEventuallyReturnsOnceTheCheckPasses(t *testing.T) {
	calls := 0
	start := time.Now()
	r := recorded(t, func(tb testing.TB) {
		Eventually(tb, 5*time.Second, "the third call", func() error {
			if calls++; calls < 3 {
				return errors.New("too early")
			}
			return nil
		})
	})
	if r.failed || calls != 3 {
		t.Errorf("failed=%v after %d calls", r.failed, calls)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("three quick checks took %v", took)
	}
}

func TestEventuallyFailsWithTheLastErrorAtTheDeadline(t *testing.T) {
	start := time.Now()
	r := recorded(t, func(tb testing.TB) {
		Eventually(tb, 300*time.Millisecond, "web answers", func() error { return errors.New("refused") })
	})
	took := time.Since(start)
	if !r.failed || !strings.Contains(r.msg, "%s: still not so after %v: %v") {
		t.Errorf("failed=%v with %q", r.failed, r.msg)
	}
	if took < 300*time.Millisecond || took > 2*time.Second {
		t.Errorf("failed after %v, want at the 300ms deadline", took)
	}
}

func TestUntilWaitsForTheCondition(t *testing.T) {
	at := time.Now().Add(100 * time.Millisecond)
	if r := recorded(t, func(tb testing.TB) {
		Until(tb, 5*time.Second, "100ms to pass", func() bool { return time.Now().After(at) })
	}); r.failed {
		t.Error("Until failed on a condition that came true")
	}
	if r := recorded(t, func(tb testing.TB) {
		Until(tb, 100*time.Millisecond, "never", func() bool { return false })
	}); !r.failed {
		t.Error("Until did not fail on a condition that never came true")
	}
}

func TestConsistentlyChecksForTheWholeTimeAndFailsAtOnce(t *testing.T) {
	calls := 0
	start := time.Now()
	if r := recorded(t, func(tb testing.TB) {
		Consistently(tb, 300*time.Millisecond, "nothing happens", func() error { calls++; return nil })
	}); r.failed || time.Since(start) < 300*time.Millisecond || calls < 3 {
		t.Errorf("failed=%v, %d calls in %v", r.failed, calls, time.Since(start))
	}
	start = time.Now()
	broken := start.Add(50 * time.Millisecond)
	r := recorded(t, func(tb testing.TB) {
		Consistently(tb, 10*time.Second, "nothing happens", func() error {
			if time.Now().After(broken) {
				return errors.New("something happened")
			}
			return nil
		})
	})
	if !r.failed || time.Since(start) > 2*time.Second {
		t.Errorf("failed=%v after %v; want a failure soon after 50ms", r.failed, time.Since(start))
	}
}

func TestUnavailableSkipsOrFailsInCI(t *testing.T) {
	need := func(tb testing.TB) { Unavailable(tb, "the OpenSSH client is not installed") }
	if r := stopped(t, "", need); !r.skipped || r.failed {
		t.Errorf("without CI, Unavailable did not skip (failed=%v)", r.failed)
	}
	if r := stopped(t, "true", need); !r.failed {
		t.Errorf("with CI=true, Unavailable did not fail (skipped=%v)", r.skipped)
	}
}
