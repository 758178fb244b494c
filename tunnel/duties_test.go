package tunnel

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"plug/tunnel/clustertest"
)

// Duties runs each duty on its own rhythm and a kicked one at once, and
// returns when its context ends.
func TestDutiesRunEachOnItsRhythmAndAKickAtOnce(t *testing.T) {
	var beats, sweeps atomic.Int32
	kick := make(chan struct{})
	kicked := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		Duties{
			Heartbeat:  time.Millisecond,
			SweepEvery: time.Hour,
			Beat:       func(context.Context) { beats.Add(1) },
			Sweep:      func(context.Context) { sweeps.Add(1) },
			Kick:       kick,
			Kicked:     func(context.Context) { kicked <- struct{}{} },
		}.Run(ctx)
		close(done)
	}()
	kick <- struct{}{}
	select {
	case <-kicked:
	case <-time.After(clustertest.Settle):
		t.Fatal("a kick did not run Kicked")
	}
	clustertest.Until(t, clustertest.Settle, "three beats at a 1 ms heartbeat", func() bool { return beats.Load() >= 3 })
	cancel()
	select {
	case <-done:
	case <-time.After(clustertest.Settle):
		t.Fatal("Run did not return when its context ended")
	}
	if n := sweeps.Load(); n != 0 {
		t.Errorf("%d sweeps before the first SweepEvery", n)
	}
}
