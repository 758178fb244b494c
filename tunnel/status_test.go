package tunnel_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"plug/tunnel"
	"plug/tunnel/tunneltest"
)

// lackingPlatform is the in-memory platform without the right to take
// over a Service until it is granted, and without an optional right.
type lackingPlatform struct {
	*tunnel.MemoryPlatform
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
	platform := &lackingPlatform{MemoryPlatform: tunneltest.NewPlatform()}
	var log lines
	addr, hostKey, _ := tunneltest.StartAgent(t, platform, agentLog(&log))
	signer, _ := newKey(t)
	cfg := tunnel.ClientConfig{Addr: addr, User: "dev", Signer: signer, HostKey: hostKey, Run: tunnel.RunInfo{Serves: true}}

	for _, want := range []string{
		"missing right patch services (for -s: take over a deployed Service), which runs need; grant it with: kubectl -n ns patch role plug --type=json -p '[...]'",
		"missing right watch pods (for follow pods at once): that feature is off",
		"not serving runs: the agent lacks rights runs need",
	} {
		waitFor(t, 5*time.Second, "the agent's log to say "+want, func() bool { return log.has(want) })
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
	var log lines
	addr, hostKey, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform(), agentLog(&log))
	signer, _ := newKey(t)
	d := diagnose(t, addr, tunnel.ClientConfig{User: "dev", Signer: signer, HostKey: hostKey})
	if d.Status.Refusing != "" || d.Status.Agent != "agent-0" || d.Handshake <= 0 {
		t.Errorf("status of a healthy agent: %+v, %+v", d, d.Status)
	}
	if log.has("opened by") {
		t.Errorf("a status request opened a run:\n%s", log.String())
	}
}
