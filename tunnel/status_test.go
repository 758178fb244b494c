package tunnel_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// lackingPlatform is the in-memory platform without the right to take
// over a Service until it is granted, and without an optional right.
type lackingPlatform struct {
	*tunneltest.Platform
	granted atomic.Bool
}

func (p *lackingPlatform) Rights(context.Context) ([]tunnel.Right, error) {
	return []tunnel.Right{
		{Rule: "get services", Feature: "-s", Required: true, Granted: true},
		{Rule: "patch services", Feature: "-s: take over a deployed Service", Required: true, Granted: p.granted.Load(),
			Fix: "kubectl -n ns patch role plug --type=json -p '[...]'"},
		{Rule: "watch pods", Feature: "follow pods at once", Granted: false},
	}, nil
}

// diagnose asks the agent's status as plug doctor does.
func diagnose(t *testing.T, addr string, cfg tunnel.ClientConfig) *tunnel.Diagnosis {
	t.Helper()
	cfg.Addr = addr
	d, err := tunnel.Diagnose(ctxFor(t, 20*time.Second), cfg)
	if err != nil {
		t.Fatalf("Diagnose: %v", err)
	}
	if d.Status == nil {
		t.Fatal("the agent did not answer the status request")
	}
	return d
}

// An agent lacking a right that runs need does not serve: its log names
// the rule and how to grant it, each run is refused naming it, and it
// answers status requests with every right. Once the right is granted, the
// next status request (or its own check) lets it serve, with no restart.
func TestAgentWithoutARightRefusesRunsAndAnswersDoctor(t *testing.T) {
	platform := &lackingPlatform{Platform: tunneltest.NewPlatform()}
	var log lines
	addr, hostKey, _ := tunneltest.StartAgent(t, platform, agentLog(&log))
	signer, _ := newKey(t)
	cfg := tunnel.ClientConfig{Addr: addr, User: "dev", Signer: signer, HostKey: hostKey, Run: tunnel.RunInfo{Serves: true}}

	for _, want := range []string{
		"missing right patch services (for -s: take over a deployed Service), which runs need; grant it with: kubectl -n ns patch role plug --type=json -p '[...]'",
		"missing right watch pods (for follow pods at once): that feature is off",
		"not serving runs: the agent lacks rights runs need",
	} {
		clustertest.Until(t, clustertest.Settle, "the agent's log to say "+want, func() bool { return log.has(want) })
	}

	_, err := tunnel.Connect(ctxFor(t, 20*time.Second), cfg)
	var ended *tunnel.EndedError
	if !errors.As(err, &ended) || !strings.Contains(err.Error(), "lacks rights in the cluster that runs need (patch services)") ||
		!strings.Contains(err.Error(), "plug doctor") {
		t.Fatalf("a run on a refusing agent: %v", err)
	}

	d := diagnose(t, addr, cfg)
	if d.AgentVersion != tunnel.Version || d.Status.Version != tunnel.Version || d.Status.Platform != "in-memory platform" {
		t.Errorf("versions and platform: %+v, %+v", d, d.Status)
	}
	if !strings.Contains(d.Status.Refusing, "patch services") {
		t.Errorf("the status does not say why runs are refused: %q", d.Status.Refusing)
	}
	var missing []string
	for _, r := range d.Status.Rights {
		if !r.Granted {
			missing = append(missing, r.Rule+" → "+r.Fix)
		}
	}
	if strings.Join(missing, "; ") != "patch services → kubectl -n ns patch role plug --type=json -p '[...]'; watch pods → " {
		t.Errorf("missing rights in the status: %q", missing)
	}
	if calls := platform.Calls(); len(calls) > 0 {
		t.Errorf("a refusing agent asked the platform to %v", calls)
	}

	platform.granted.Store(true)
	if d := diagnose(t, addr, cfg); d.Status.Refusing != "" {
		t.Errorf("granted, the agent still refuses: %q", d.Status.Refusing)
	}
	if !log.has("every right runs need is granted: serving runs") {
		t.Errorf("the agent did not say it serves runs now:\n%s", log.String())
	}
	s, _ := connect(t, addr, hostKey, signer, tunnel.RunInfo{Serves: true})
	if _, err := s.Serve(ctxFor(t, 20*time.Second), "web", 80, echoServer(t, "laptop says ")); err != nil {
		t.Fatalf("serving once the right is granted: %v", err)
	}
}

// A status request opens no run: doctor leaves no trace in who is plugged in.
func TestDiagnoseOpensNoRun(t *testing.T) {
	audit := tunneltest.NewAudit()
	addr, hostKey, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform(), func(a *tunnel.Agent) { a.Audit = audit.Sink })
	signer, _ := newKey(t)
	d := diagnose(t, addr, tunnel.ClientConfig{User: "dev", Signer: signer, HostKey: hostKey})
	if d.Status.Refusing != "" || d.Status.Agent != "agent-0" || d.Handshake <= 0 {
		t.Errorf("status of a healthy agent: %+v, %+v", d, d.Status)
	}
	if opened := audit.Events(tunnel.AuditRunOpened); len(opened) > 0 {
		t.Errorf("a status request opened a run: %+v", opened)
	}
}

// The agent's ready file exists exactly while it serves runs: not while
// it lacks a right runs need (a stale one is removed at start), as soon as
// the right is granted, and no longer once it stopped.
func TestTheReadyFileTellsWhetherTheAgentServesRuns(t *testing.T) {
	platform := &lackingPlatform{Platform: tunneltest.NewPlatform()}
	ready := filepath.Join(t.TempDir(), "ready")
	if err := os.WriteFile(ready, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	addr, hostKey, stop := tunneltest.StartAgent(t, platform, func(a *tunnel.Agent) { a.ReadyFile = ready })
	signer, _ := newKey(t)
	exists := func() bool { _, err := os.Stat(ready); return err == nil }
	diagnose(t, addr, tunnel.ClientConfig{User: "dev", Signer: signer, HostKey: hostKey})
	if exists() {
		t.Error("the ready file is there while the agent refuses runs")
	}
	platform.granted.Store(true)
	diagnose(t, addr, tunnel.ClientConfig{User: "dev", Signer: signer, HostKey: hostKey})
	clustertest.Until(t, clustertest.Settle, "the ready file", exists)
	stop()
	if exists() {
		t.Error("the ready file is left after the agent stopped")
	}
}

// A CLI of another major version than the agent's is refused at hello with
// the command that aligns them; one of another minor version runs, with
// one warning line.
func TestVersionSkewAtHello(t *testing.T) {
	was := tunnel.Version
	tunnel.Version = "v3.2.0" // the agent's
	t.Cleanup(func() { tunnel.Version = was })
	addr, hostKey, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform())
	signer, _ := newKey(t)

	cfg := tunnel.ClientConfig{Addr: addr, User: "dev", Signer: signer, HostKey: hostKey, Profile: "work", Run: tunnel.RunInfo{Version: "v2.9.0"}}
	_, err := tunnel.Connect(ctxFor(t, 20*time.Second), cfg)
	var skew *tunnel.VersionError
	if !errors.As(err, &skew) || !strings.Contains(err.Error(), "CLI v2.9.0 and agent v3.2.0: different major versions") ||
		!strings.HasSuffix(err.Error(), "run plug update -p work") {
		t.Fatalf("a CLI of the previous major version: %v", err)
	}
	cfg.Run.Version = "v4.0.0"
	if _, err := tunnel.Connect(ctxFor(t, 20*time.Second), cfg); !errors.As(err, &skew) || !strings.Contains(err.Error(), "re-apply the agent's manifest with plug's image of v4.0.0") {
		t.Fatalf("a CLI of the next major version: %v", err)
	}

	_, events := connect(t, addr, hostKey, signer, tunnel.RunInfo{Version: "v3.1.5"}, func(c *tunnel.ClientConfig) { c.Profile = "work" })
	want := "CLI v3.1.5 and agent v3.2.0 differ in minor version: compatible (same major version); to align them, run plug update -p work"
	clustertest.Until(t, clustertest.Settle, "the warning of a minor skew", func() bool { return events.has(want) })
	if n := strings.Count(events.String(), "differ in minor version"); n != 1 {
		t.Errorf("the minor skew was told %d times, want once:\n%s", n, events)
	}
}
