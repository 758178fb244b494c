package tunnel_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// Stopping the agent for good ends every run, not to reconnect, saying
// who closed the tunnel and why, and gives its names back.
func TestStopEndsEveryRunSayingWhy(t *testing.T) {
	platform := tunneltest.NewPlatform()
	platform.AddWorkload("web:80", "127.0.0.1:1")
	audit := tunneltest.NewAudit()
	var agent *tunnel.Agent
	addr, hostKey, _ := tunneltest.StartAgent(t, platform, func(a *tunnel.Agent) { agent, a.Audit = a, audit.Sink })
	signer, _ := newKey(t)
	s, _ := connect(t, addr, hostKey, signer, tunnel.RunInfo{Serves: true})
	if _, err := s.Serve(ctxFor(t, 10*time.Second), "web", 80, echoServer(t, "")); err != nil {
		t.Fatal(err)
	}
	agent.Stop("the operator", "the agent was scaled to zero")
	select {
	case <-s.Done():
	case <-time.After(clustertest.Settle):
		t.Fatal("the run goes on after Stop")
	}
	var e *tunnel.EndedError
	if !errors.As(s.Err(), &e) || e.By != "the operator" || e.Reason != "the agent was scaled to zero" {
		t.Errorf("the developer reads: %v", s.Err())
	}
	if _, held := platform.Held("web"); held {
		t.Error("web is still held")
	}
	ended := audit.Await(t, clustertest.Settle, "run.ended", func(e tunnel.AuditEvent) bool { return e.Event == tunnel.AuditRunEnded })
	if ended.How != tunnel.EndClosed || ended.By != "the operator" {
		t.Errorf("run.ended: %+v", ended)
	}
}

// An agent started Closed refuses every run, and doctor, naming the switch.
func TestClosedAgentRefusesRuns(t *testing.T) {
	addr, hostKey, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform(), func(a *tunnel.Agent) { a.Closed = "PLUG_TUNNEL=closed" })
	signer, _ := newKey(t)
	_, err := tunnel.Connect(ctxFor(t, 10*time.Second), tunnel.ClientConfig{Addr: addr, User: "dev", Signer: signer, HostKey: hostKey})
	var e *tunnel.EndedError
	if !errors.As(err, &e) || !strings.Contains(e.Reason, "the tunnel is closed (PLUG_TUNNEL=closed)") {
		t.Errorf("a run on a closed agent: %v", err)
	}
	d, err := tunnel.Diagnose(ctxFor(t, 10*time.Second), tunnel.ClientConfig{Addr: addr, User: "dev", Signer: signer, HostKey: hostKey})
	if err != nil || d.Status == nil || !strings.Contains(d.Status.Refusing, "PLUG_TUNNEL=closed") {
		t.Errorf("doctor of a closed agent: %+v %v", d, err)
	}
}
