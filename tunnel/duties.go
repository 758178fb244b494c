package tunnel

import (
	"context"
	"time"
)

// Duties is the rhythm of a platform's background work, for Maintain: a
// heartbeat that renews what the agent holds, a sweep that gives back what
// gone holders left, and, optionally, work asked for at once.
type Duties struct {
	Heartbeat  time.Duration // how often Beat runs
	SweepEvery time.Duration // how often Sweep runs
	Beat       func(context.Context)
	Sweep      func(context.Context)

	// Kick, when not nil, runs Kicked on every receive.
	Kick   <-chan struct{}
	Kicked func(context.Context)
}

// DefaultTimes returns a platform's heartbeat, stale and sweep periods
// with each one that is not positive (left unset in its Options) replaced
// by the default: a heartbeat every 20 s, stale after 90 s without one, a
// sweep every minute.
func DefaultTimes(heartbeat, stale, sweep time.Duration) (time.Duration, time.Duration, time.Duration) {
	def := func(d, to time.Duration) time.Duration {
		if d <= 0 {
			return to
		}
		return d
	}
	return def(heartbeat, 20*time.Second), def(stale, 90*time.Second), def(sweep, time.Minute)
}

// Run calls Beat every Heartbeat, Sweep every SweepEvery and Kicked on each
// Kick, one at a time, until ctx ends. It runs nothing at once: a caller
// that sweeps at start does so before Run.
func (d Duties) Run(ctx context.Context) {
	beat := time.NewTicker(d.Heartbeat)
	defer beat.Stop()
	sweep := time.NewTicker(d.SweepEvery)
	defer sweep.Stop()
	for {
		select {
		case <-beat.C:
			d.Beat(ctx)
		case <-sweep.C:
			d.Sweep(ctx)
		case <-d.Kick:
			d.Kicked(ctx)
		case <-ctx.Done():
			return
		}
	}
}
