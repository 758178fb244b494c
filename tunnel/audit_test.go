package tunnel_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"plug/keys"
	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// The audit trail says of each run who opened it, from where, with which
// plug; each name it served, parked or added, and when it was given back;
// and how the run ended, with how long it lasted.
func TestAuditTrailOfARun(t *testing.T) {
	platform := tunneltest.NewPlatform()
	platform.AddWorkload("checkout:80", "127.0.0.1:1")
	audit := tunneltest.NewAudit()
	addr, hostKey, _ := tunneltest.StartAgent(t, platform, func(a *tunnel.Agent) { a.Audit = audit.Sink })
	signer, _ := newKey(t)
	fp := keys.Fingerprint(signer.PublicKey())
	s, _ := connect(t, addr, hostKey, signer, tunnel.RunInfo{ID: "run-1", Version: "v9.9.9", Serves: true, Comment: "alice@laptop"})
	ctx := ctxFor(t, 20*time.Second)
	if _, err := s.Serve(ctx, "checkout", 80, echoServer(t, "")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Serve(ctx, "brandnew", 8080, echoServer(t, "")); err != nil {
		t.Fatal(err)
	}
	s.Close()

	opened := audit.Await(t, clustertest.Settle, "run.opened", func(e tunnel.AuditEvent) bool { return e.Event == tunnel.AuditRunOpened })
	if opened.Run != "run-1" || opened.User != "dev" || opened.Key != fp || opened.Comment != "alice@laptop" ||
		opened.Version != "v9.9.9" || opened.Kind != tunnel.KindServes || !strings.HasPrefix(opened.From, "127.0.0.1:") || opened.Agent != "agent-0" {
		t.Errorf("run.opened: %+v", opened)
	}
	ended := audit.Await(t, clustertest.Settle, "run.ended", func(e tunnel.AuditEvent) bool { return e.Event == tunnel.AuditRunEnded })
	if ended.How != tunnel.EndGoodbye || ended.Seconds == nil || !slices.Equal(ended.Names, []string{"brandnew:8080", "checkout:80"}) {
		t.Errorf("run.ended: %+v", ended)
	}
	for _, want := range []struct{ event, name, mode string }{
		{tunnel.AuditNameServed, "checkout", tunnel.ModeParked},
		{tunnel.AuditNameServed, "brandnew", tunnel.ModeAdded},
		{tunnel.AuditNameBack, "checkout", tunnel.ModeParked},
		{tunnel.AuditNameBack, "brandnew", tunnel.ModeAdded},
	} {
		e := audit.Await(t, clustertest.Settle, want.event+" "+want.name, func(e tunnel.AuditEvent) bool { return e.Event == want.event && e.Name == want.name })
		if e.Mode != want.mode || e.Run != "run-1" || e.Key != fp {
			t.Errorf("%s %s: %+v", want.event, want.name, e)
		}
		if want.event == tunnel.AuditNameBack && e.Seconds == nil {
			t.Errorf("%s %s has no duration", want.event, want.name)
		}
	}
}

// A run ended by somebody, and one whose connection dropped, say so.
func TestAuditTrailOfRunsEndedAndDropped(t *testing.T) {
	audit := tunneltest.NewAudit()
	var agent *tunnel.Agent
	addr, hostKey, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform(), func(a *tunnel.Agent) { a.Audit = audit.Sink; agent = a })
	signer, _ := newKey(t)
	connect(t, addr, hostKey, signer, tunnel.RunInfo{ID: "ended-1"})
	audit.Await(t, clustertest.Settle, "run.opened", func(e tunnel.AuditEvent) bool { return e.Event == tunnel.AuditRunOpened && e.Run == "ended-1" })
	if err := agent.EndRun("ended-1", "bob (SHA256:x)", "lunch\x1b[2J"); err != nil {
		t.Fatal(err)
	}
	e := audit.Await(t, clustertest.Settle, "run.ended", func(e tunnel.AuditEvent) bool { return e.Event == tunnel.AuditRunEnded && e.Run == "ended-1" })
	if e.How != tunnel.EndEnded || e.By != "bob (SHA256:x)" {
		t.Errorf("run ended by somebody: %+v", e)
	}
	// A peer's string reaches the line escaped: no raw control character.
	var buf bytes.Buffer
	tunnel.AuditJSON(&buf)(e)
	if bytes.ContainsAny(buf.Bytes()[:buf.Len()-1], "\x1b\n") || bytes.Count(buf.Bytes(), []byte("\n")) != 1 {
		t.Errorf("the audit line is not one escaped line: %q", buf.String())
	}
	var back tunnel.AuditEvent
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil || back.Reason != `lunch\x1b[2J` {
		t.Errorf("the line does not read back: %v %+v", err, back)
	}

	proxy := tunneltest.NewProxy(t, addr)
	connect(t, proxy.Addr(), hostKey, signer, tunnel.RunInfo{ID: "dropped-1"}, func(c *tunnel.ClientConfig) { c.KeepAlive = time.Hour })
	audit.Await(t, clustertest.Settle, "run.opened", func(e tunnel.AuditEvent) bool { return e.Event == tunnel.AuditRunOpened && e.Run == "dropped-1" })
	proxy.Close()
	e = audit.Await(t, clustertest.Settle, "run.ended dropped", func(e tunnel.AuditEvent) bool { return e.Event == tunnel.AuditRunEnded && e.Run == "dropped-1" })
	if e.How != tunnel.EndDropped || e.By != "" {
		t.Errorf("a dropped run: %+v", e)
	}
}
