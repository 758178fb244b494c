package tunnel

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// The agent checks its rights in the cluster (Platform.Rights) when it
// starts. Without a right that runs need it does not start serving: it
// logs each missing rule with the command that grants it, refuses every
// run with the same words, and answers only plug doctor's status requests,
// so that a developer can see why from their terminal. It checks again
// every rightsRecheck, and at each status request; once every required
// right is granted it starts serving, with no restart. A missing optional
// right is logged, and its feature is off.

const (
	// rightsRecheck is how often an agent that lacks a required right
	// checks again.
	rightsRecheck = 30 * time.Second
	// rightsTimeout bounds one check.
	rightsTimeout = 30 * time.Second
)

// rightsGate is what the agent last learnt of its rights.
type rightsGate struct {
	ready     chan struct{} // closed once every required right is granted
	readyOnce sync.Once

	checking sync.Mutex // one check at a time

	mu      sync.Mutex
	rights  []Right
	err     error // the last check failed
	checked time.Time
	logged  string // the last report logged: only changes are logged
}

func newRightsGate() *rightsGate { return &rightsGate{ready: make(chan struct{})} }

// isReady reports whether every required right was granted once.
func (g *rightsGate) isReady() bool { return isClosed(g.ready) }

// checkRights asks the platform for the agent's rights, and logs what
// changed. Callers that ask while a check is in progress share the next;
// a check made less than maxAge before the call is reused.
func (a *Agent) checkRights(ctx context.Context, maxAge time.Duration) ([]Right, error) {
	g := a.gate
	asked := time.Now().Add(-maxAge)
	g.checking.Lock()
	defer g.checking.Unlock()
	g.mu.Lock()
	if g.checked.After(asked) {
		defer g.mu.Unlock()
		return g.rights, g.err
	}
	g.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, rightsTimeout)
	rights, err := a.Platform.Rights(ctx)
	cancel()
	wasReady := g.isReady()
	report, ready := rightsReport(rights, err, wasReady)

	g.mu.Lock()
	g.rights, g.err, g.checked = rights, err, time.Now()
	changed := report != g.logged
	g.logged = report
	g.mu.Unlock()
	if changed && report != "" {
		for _, line := range strings.Split(report, "\n") {
			a.logf("%s", line)
		}
	}
	if ready && !wasReady {
		g.readyOnce.Do(func() { close(g.ready) })
		if changed {
			a.logf("every right runs need is granted: serving runs")
		}
	}
	return rights, err
}

// rightsReport is what the agent logs of a check: each missing right, and
// whether the agent may serve runs. An agent serving already goes on (a
// right taken away later makes what needs it fail, with the cluster's
// words), and says so.
func rightsReport(rights []Right, err error, serving bool) (report string, ready bool) {
	if err != nil && serving {
		return fmt.Sprintf("cannot check the agent's rights in the cluster (%v)", err), false
	}
	if err != nil {
		return fmt.Sprintf("not serving runs yet: cannot check the agent's rights in the cluster (%v); checking again every %s", err, rightsRecheck), false
	}
	var lines []string
	ready = true
	for _, r := range rights {
		if r.Granted {
			continue
		}
		line := fmt.Sprintf("missing right %s (for %s)", r.Rule, r.Feature)
		if r.Required {
			ready = false
			line += ", which runs need"
		} else {
			line += ": that feature is off"
		}
		if r.Fix != "" {
			line += "; grant it with: " + r.Fix
		}
		lines = append(lines, line)
	}
	switch {
	case !ready && serving:
		lines = append(lines, "the agent serves runs, but lacks rights they need (above): what needs them fails until they are granted again")
	case !ready:
		lines = append(lines, fmt.Sprintf("not serving runs: the agent lacks rights runs need (above); it refuses each run naming them, answers plug doctor, and checks again every %s. Apply the manifest as a whole, or grant each right with the command shown.", rightsRecheck))
	}
	return strings.Join(lines, "\n"), ready
}

// awaitRights checks the agent's rights until every required one is
// granted (true) or ctx ends (false).
func (a *Agent) awaitRights(ctx context.Context) bool {
	for {
		a.checkRights(ctx, 0)
		if a.gate.isReady() {
			return true
		}
		select {
		case <-a.gate.ready:
			return true
		case <-ctx.Done():
			return false
		case <-time.After(rightsRecheck):
		}
	}
}

// refusal says why the agent refuses runs, or "" when it serves them.
func (a *Agent) refusal() string {
	if a.Closed != "" {
		return closedText(a.Closed)
	}
	g := a.gate
	if g.isReady() {
		return ""
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return fmt.Sprintf("the agent cannot check its rights in the cluster (%v), so it serves no runs yet; it checks again every %s", g.err, rightsRecheck)
	}
	var missing []string
	for _, r := range g.rights {
		if r.Required && !r.Granted {
			missing = append(missing, r.Rule)
		}
	}
	if len(missing) == 0 {
		return "the agent is checking its rights in the cluster; try again in a moment"
	}
	return fmt.Sprintf("the agent serves no runs: it lacks rights in the cluster that runs need (%s). "+
		"Ask the cluster admin to apply the agent's manifest as a whole; plug doctor prints the one command that grants each", strings.Join(missing, ", "))
}
