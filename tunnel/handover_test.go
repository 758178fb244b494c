package tunnel_test

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// callers calls dial every few milliseconds, each time on a new
// connection, until stop, counting the answers by who gave them and the
// failures.
type callers struct {
	mu       sync.Mutex
	answers  map[string]int
	failures []failure
	last     string
	stop     chan struct{}
	done     chan struct{}
}

func startCallers(dial func() (net.Conn, error)) *callers {
	c := &callers{answers: map[string]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			select {
			case <-c.stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			start := time.Now()
			who, err := call(dial)
			c.mu.Lock()
			if err != nil {
				c.failures = append(c.failures, failure{err: err.Error(), start: start, end: time.Now()})
			} else {
				c.answers[who]++
				c.last = who
			}
			c.mu.Unlock()
		}
	}()
	return c
}

// failure is a call that failed, and when it was made.
type failure struct {
	err        string
	start, end time.Time
}

// call makes one call and returns who answered ("run" or "deployed").
func call(dial func() (net.Conn, error)) (string, error) {
	conn, err := dial()
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(3 * time.Second))
	got, err := roundTrip(conn, "hi")
	if err != nil {
		return "", err
	}
	who, ok := strings.CutSuffix(got, ": hi")
	if !ok {
		return "", fmt.Errorf("answer %q", got)
	}
	return who, nil
}

// until waits for who to answer the next calls.
func (c *callers) until(t *testing.T, who string) {
	t.Helper()
	clustertest.Until(t, clustertest.Settle, who+" answering the callers", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.last == who
	})
}

// end stops the callers and fails t if any call failed, except one in
// flight at cut (when not zero): a request the run was answering when its
// connection was cut dies with it, as README says; it is logged apart.
func (c *callers) end(t *testing.T, cut time.Time) {
	t.Helper()
	close(c.stop)
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	var failed []string
	for _, f := range c.failures {
		if f.start.Before(cut) && f.end.After(cut) {
			t.Logf("a call in flight at the cut failed (counted apart): %s", f.err)
			continue
		}
		failed = append(failed, f.err)
	}
	t.Logf("answers: %v; failures: %d", c.answers, len(failed))
	if len(failed) > 0 {
		t.Errorf("%d calls failed, the first: %s", len(failed), failed[0])
	}
}

// sharedKey makes agents started with it present one host key, as the
// replicas of a deployed agent do.
func sharedKey(t *testing.T) (ssh.Signer, func(*tunnel.Agent)) {
	signer, _ := newKey(t)
	return signer, func(a *tunnel.Agent) { a.HostKey = signer }
}

// While the process behind a taken-over name does not answer yet (CMD
// starts after plug serves the name), its callers go to the deployed
// service; once it answers, to the run. No call fails.
func TestCallersReachTheDeployedServiceUntilTheProcessAnswers(t *testing.T) {
	platform := tunneltest.NewPlatform()
	platform.AddWorkload("web:80", echoServer(t, "deployed: "))
	addr, hostKey, _ := tunneltest.StartAgent(t, platform)
	signer, _ := newKey(t)
	s, _ := connect(t, addr, hostKey, signer, tunnel.RunInfo{ID: "run-mbb-1", Serves: true})
	local := net.JoinHostPort("127.0.0.1", itoa(freePort(t)))
	if _, err := s.Serve(ctxFor(t, 20*time.Second), "web", 80, local); err != nil {
		t.Fatal(err)
	}
	c := startCallers(platformDial(platform, "web:80"))
	c.until(t, "deployed")
	l, err := net.Listen("tcp", local)
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, l, echo("run: ")) // CMD answers now
	c.until(t, "run")
	c.end(t, time.Time{})
}

// While a run is away (its connection dropped, within its grace), the
// callers of a name it took over reach the deployed service, and come back
// to the run once it re-attaches; the callers of a name it created are
// refused at once. No call of the taken-over name fails.
func TestCallersOfARunAway(t *testing.T) {
	platform := tunneltest.NewPlatform()
	platform.AddWorkload("web:80", echoServer(t, "deployed: "))
	audit := tunneltest.NewAudit()
	agentAddr, hostKey, _ := tunneltest.StartAgent(t, platform, func(a *tunnel.Agent) { a.Grace = time.Minute; a.Audit = audit.Sink })
	proxy := tunneltest.NewProxy(t, agentAddr)
	signer, _ := newKey(t)
	s, events := connect(t, proxy.Addr(), hostKey, signer, tunnel.RunInfo{ID: "run-mbb-2", Serves: true})
	ctx := ctxFor(t, 20*time.Second)
	if _, err := s.Serve(ctx, "web", 80, echoServer(t, "run: ")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Serve(ctx, "fresh", 81, echoServer(t, "run: ")); err != nil {
		t.Fatal(err)
	}
	c := startCallers(platformDial(platform, "web:80"))
	c.until(t, "run")

	proxy.Retarget("127.0.0.1:1") // the laptop is gone: no reconnect gets through
	proxy.Cut()
	cut := time.Now()
	c.until(t, "deployed")
	away := audit.Await(t, clustertest.Settle, "run.away", func(e tunnel.AuditEvent) bool { return e.Event == tunnel.AuditRunAway && e.Run == "run-mbb-2" })
	if !strings.Contains(away.Reason, "callers of web:80 go to the deployed service") || !strings.Contains(away.Reason, "callers of fresh:81 are refused at once") {
		t.Errorf("the audit does not say where the callers go while the run is away: %+v", away)
	}
	start := time.Now()
	_, err := call(platformDial(platform, "fresh:81"))
	if err == nil || time.Since(start) > time.Second {
		t.Errorf("a call of the created name while the run is away: %v after %v, want a refusal at once", err, time.Since(start))
	}

	proxy.Retarget(agentAddr) // back: the session re-attaches
	clustertest.Until(t, clustertest.Settle, "the run to re-attach", func() bool { return events.has("web:80") && events.has("kept") })
	c.until(t, "run")
	c.end(t, cut)
}

// A stopping agent hands its connected run to another agent: the run
// reconnects there and serves its names there, the stopping agent carries
// the run's callers until then, and lets go of the names without giving
// them back. No call fails, and the callers reach the run throughout.
func TestStoppingAgentHandsTheRunToAnother(t *testing.T) {
	platform := tunneltest.NewPlatform()
	platform.AddWorkload("web:80", echoServer(t, "deployed: "))
	key, shared := sharedKey(t)
	audit := tunneltest.NewAudit()
	oldAddr, _, stopOld := tunneltest.StartAgent(t, platform, shared, func(a *tunnel.Agent) { a.ID = "agent-old"; a.Audit = audit.Sink })
	newAddr, _, _ := tunneltest.StartAgent(t, platform, shared, func(a *tunnel.Agent) { a.ID = "agent-new" })
	proxy := tunneltest.NewProxy(t, oldAddr)
	signer, _ := newKey(t)
	s, events := connect(t, proxy.Addr(), key.PublicKey(), signer, tunnel.RunInfo{ID: "run-mbb-3", Serves: true})
	if _, err := s.Serve(ctxFor(t, 20*time.Second), "web", 80, echoServer(t, "run: ")); err != nil {
		t.Fatal(err)
	}
	c := startCallers(platformDial(platform, "web:80"))
	c.until(t, "run")

	proxy.Retarget(newAddr) // the stopping agent no longer accepts; its Service reaches the other
	stopOld()
	if !events.has("moved to agent agent-new") {
		t.Errorf("the session does not say it moved:\n%s", events)
	}
	if b, held := platform.Held("web"); !held || b.Holder.Agent != "agent-new" {
		t.Errorf("web is held by %+v (held: %t), want the new agent", b.Holder, held)
	}
	if n := platform.Count("serve", "web"); n != 2 {
		t.Errorf("web was served %d times, want twice (once by each agent)", n)
	}
	ended := audit.Await(t, clustertest.Settle, "run.ended", func(e tunnel.AuditEvent) bool { return e.Event == tunnel.AuditRunEnded && e.Run == "run-mbb-3" })
	if ended.How != tunnel.EndMoved || !strings.Contains(ended.Reason, "agent-new") {
		t.Errorf("the old agent's audit of the run's end: %+v, want it moved to agent-new", ended)
	}
	if back := audit.Events(tunnel.AuditNameBack); len(back) != 0 {
		t.Errorf("the old agent audits a give-back of a name that moved: %+v", back)
	}
	c.until(t, "run")
	c.end(t, time.Time{})
	if c.answers["deployed"] != 0 {
		t.Errorf("%d calls reached the deployed service during the handover", c.answers["deployed"])
	}
	select {
	case <-s.Done():
		t.Errorf("the session ended: %v", s.Err())
	default:
	}
}

// A stopping agent whose run finds no other agent to move to gives the
// names back while the run goes on answering its callers, then ends the
// run, which reconnects. No call fails.
func TestStoppingAgentWithNoOtherGivesBackWhileTheRunAnswers(t *testing.T) {
	platform := tunneltest.NewPlatform()
	platform.AddWorkload("web:80", echoServer(t, "deployed: "))
	addr, hostKey, stop := tunneltest.StartAgent(t, platform)
	proxy := tunneltest.NewProxy(t, addr)
	signer, _ := newKey(t)
	s, events := connect(t, proxy.Addr(), hostKey, signer, tunnel.RunInfo{ID: "run-mbb-4", Serves: true})
	if _, err := s.Serve(ctxFor(t, 20*time.Second), "web", 80, echoServer(t, "run: ")); err != nil {
		t.Fatal(err)
	}
	c := startCallers(platformDial(platform, "web:80"))
	c.until(t, "run")
	proxy.Retarget("127.0.0.1:1") // no other agent answers
	stop()
	if _, held := platform.Held("web"); held {
		t.Error("web is still served after the agent stopped")
	}
	if !events.has("could not move the run to another agent") {
		t.Errorf("the session does not say it could not move:\n%s", events)
	}
	c.until(t, "deployed")
	c.end(t, time.Time{})
	if c.answers["run"] == 0 {
		t.Error("no call reached the run")
	}
}
