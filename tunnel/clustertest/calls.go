package clustertest

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Call is one request of testdata/workload's caller (`workload call`),
// which tests run in a cluster to count what callers of a name see while
// it changes hands.
type Call struct {
	At     time.Time // when it was sent
	Stream string    // "new" (a new connection each time) or "keep" (one kept alive)
	OK     bool
	Text   string // the answer, or the error
	Conn   string // the caller's local port
}

// ParseCalls reads the output of `workload call`, keeping the requests
// made from since on.
func ParseCalls(out string, since time.Time) []Call {
	var calls []Call
	for _, raw := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.SplitN(strings.TrimSpace(raw), " ", 4)
		if len(f) < 4 {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, f[0])
		if err != nil || at.Before(since) {
			continue
		}
		c := Call{At: at, Stream: f[1], OK: f[2] == "ok", Text: f[3]}
		if c.OK {
			c.Text, c.Conn, _ = strings.Cut(f[3], " conn=")
		}
		calls = append(calls, c)
	}
	return calls
}

// Tally is what the callers saw over a time.
type Tally struct {
	NewOK, NewFailed, KeepOK, KeepFailed int
	Answers                              map[string]int  // by who answered, on new connections
	KeepConns                            map[string]bool // the kept-alive connections used
	Failures                             []string        // when and what, each
}

// TallyCalls counts the calls made from from to to.
func TallyCalls(calls []Call, from, to time.Time) Tally {
	var ty Tally
	for _, c := range calls {
		if c.At.Before(from) || c.At.After(to) {
			continue
		}
		ty.add1(c)
	}
	return ty
}

func (ty *Tally) add1(c Call) {
	if ty.Answers == nil {
		ty.Answers, ty.KeepConns = map[string]int{}, map[string]bool{}
	}
	switch {
	case c.Stream == "new" && c.OK:
		ty.NewOK++
		ty.Answers[c.Text]++
	case c.Stream == "new":
		ty.NewFailed++
		ty.Failures = append(ty.Failures, c.At.Format("15:04:05.000")+" new: "+c.Text)
	case c.OK:
		ty.KeepOK++
		ty.KeepConns[c.Conn] = true
	default:
		ty.KeepFailed++
		ty.Failures = append(ty.Failures, c.At.Format("15:04:05.000")+" keep: "+c.Text)
	}
}

// Add adds o to ty.
func (ty *Tally) Add(o Tally) {
	if ty.Answers == nil {
		ty.Answers, ty.KeepConns = map[string]int{}, map[string]bool{}
	}
	ty.NewOK += o.NewOK
	ty.NewFailed += o.NewFailed
	ty.KeepOK += o.KeepOK
	ty.KeepFailed += o.KeepFailed
	for k, v := range o.Answers {
		ty.Answers[k] += v
	}
	for k := range o.KeepConns {
		ty.KeepConns[k] = true
	}
	ty.Failures = append(ty.Failures, o.Failures...)
}

func (ty Tally) String() string {
	return fmt.Sprintf("new connections: %d answered %v, %d failed; kept alive: %d answered over %d connections, %d failed",
		ty.NewOK, ty.Answers, ty.NewFailed, ty.KeepOK, len(ty.KeepConns), ty.KeepFailed)
}

// Caller is a `workload call` running in a cluster, read through its log:
// Log returns what it wrote from since on (kubectl logs --since-time,
// docker logs --since).
type Caller struct {
	Log func(since time.Time) (string, error)
}

// Since returns the requests sent from t0 on.
func (c Caller) Since(t testing.TB, t0 time.Time) []Call {
	t.Helper()
	out, err := c.Log(t0.Add(-time.Second))
	if err != nil {
		t.Fatalf("the caller's log: %v", err)
	}
	return ParseCalls(out, t0)
}

// Await waits until a request on a new connection sent after t0 is
// answered by who.
func (c Caller) Await(t testing.TB, who string, t0 time.Time, within time.Duration) {
	t.Helper()
	Eventually(t, within, "the callers reach "+who, func() error {
		for _, l := range c.Since(t, t0) {
			if l.Stream == "new" && l.OK && l.Text == who {
				return nil
			}
		}
		return fmt.Errorf("no answer from %s since %s", who, t0.Format("15:04:05.000"))
	})
}

// Settled returns the requests sent from t0 until now, once the caller
// has logged one sent after now (so the last of them are in), and now.
func (c Caller) Settled(t testing.TB, t0 time.Time) ([]Call, time.Time) {
	t.Helper()
	t1 := time.Now()
	var calls []Call
	Eventually(t, 30*time.Second, "the caller's requests until "+t1.Format("15:04:05.000"), func() error {
		calls = c.Since(t, t0)
		if len(calls) == 0 || !calls[len(calls)-1].At.After(t1) {
			return fmt.Errorf("%d requests logged", len(calls))
		}
		return nil
	})
	return calls, t1
}

// Count tallies the requests sent from t0 until now.
func (c Caller) Count(t testing.TB, t0 time.Time) Tally {
	t.Helper()
	calls, t1 := c.Settled(t, t0)
	return TallyCalls(calls, t0, t1)
}
