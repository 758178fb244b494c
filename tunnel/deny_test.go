package tunnel_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"plug/keys"
	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// Acceptance 2 without a cluster, with open admission: an admin denies a
// key; its run ends within 2 s with who denied it and why, its takeover
// given back, and its next connection is refused saying so, until the
// operator lifts the denial. A key that is no admin may not deny, and an
// admin may not deny their own key. The user name in plug who and in the
// audit trail is marked as asserted; the changes are audited and the
// refusal of the denied key is counted in the metrics.
func TestDenyTakesAKeyBackWithOpenAdmission(t *testing.T) {
	platform := tunneltest.NewPlatform()
	platform.AddWorkload("web:80", "127.0.0.1:1")
	admin, _ := newKey(t)
	adminFP := keys.Fingerprint(admin.PublicKey())
	ctx := ctxFor(t, 60*time.Second)
	if _, err := tunnel.Apply(ctx, platform, tunnel.MemberChange{Op: "admin", Key: adminFP, By: "the operator"}); err != nil {
		t.Fatal(err)
	}
	audit := tunneltest.NewAudit()
	m := &tunnel.Metrics{}
	var agent *tunnel.Agent
	addr, hostKey, _ := tunneltest.StartAgent(t, platform, func(a *tunnel.Agent) {
		agent = a
		a.Keys = tunnel.NewMembers(platform, false)
		a.Audit = func(e tunnel.AuditEvent) { m.Observe(e); audit.Sink(e) }
	})
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go tunnel.ServeMetrics(mctx, ml, agent, m)
	adminCfg := tunnel.ClientConfig{Addr: addr, User: "root", Signer: admin, HostKey: hostKey}

	dev, _ := newKey(t)
	devFP := keys.Fingerprint(dev.PublicKey())
	devCfg := tunnel.ClientConfig{Addr: addr, User: "alice", Signer: dev, HostKey: hostKey, Run: tunnel.RunInfo{Serves: true}}
	s, err := tunnel.Connect(ctx, devCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Serve(ctx, "web", 80, echoServer(t, "")); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, clustertest.Settle, "the admin sees the run, its user marked asserted", func() error {
		runs, all, err := tunnel.Who(ctx, adminCfg)
		if err != nil || !all || len(runs) != 1 || runs[0].Key != devFP || runs[0].User != "alice" || !runs[0].UserAsserted {
			return errors.New("who: unexpected answer")
		}
		return nil
	})
	if e := audit.Await(t, clustertest.Settle, "run.opened", func(e tunnel.AuditEvent) bool { return e.Event == tunnel.AuditRunOpened }); !e.UserAsserted || e.Key != devFP {
		t.Errorf("run.opened with open admission: %+v", e)
	}

	// Only admins deny; not their own key; not a malformed fingerprint.
	if _, _, err := tunnel.ManageMembers(ctx, tunnel.ClientConfig{Addr: addr, User: "alice", Signer: dev, HostKey: hostKey}, "deny", adminFP, ""); err == nil || !strings.Contains(err.Error(), "only the admins") {
		t.Errorf("a key that is no admin denying: %v", err)
	}
	if _, _, err := tunnel.ManageMembers(ctx, adminCfg, "deny", adminFP, ""); err == nil || !strings.Contains(err.Error(), "lock you out") {
		t.Errorf("an admin denying their own key: %v", err)
	}
	if _, _, err := tunnel.ManageMembers(ctx, adminCfg, "accept", devFP, ""); err == nil || !strings.Contains(err.Error(), "admission is open") {
		t.Errorf("accept with open admission: %v", err)
	}
	if l, _ := platform.LoadMembers(ctx); len(l.Denied) != 0 {
		t.Fatalf("a refused change denied %+v", l.Denied)
	}

	start := time.Now()
	if _, done, err := tunnel.ManageMembers(ctx, adminCfg, "deny", devFP, "laptop stolen"); err != nil || !strings.Contains(done, "denied "+devFP) {
		t.Fatalf("deny: %q %v", done, err)
	}
	select {
	case <-s.Done():
	case <-time.After(2*time.Second - time.Since(start)):
		t.Fatal("the denied key's run goes on 2 s after the denial")
	}
	t.Logf("the denied key's run ended %s after the denial", time.Since(start).Round(time.Millisecond))
	var ended *tunnel.EndedError
	if !errors.As(s.Err(), &ended) || !strings.HasPrefix(ended.By, "root (SHA256:") || !strings.Contains(ended.Reason, "denied by root") || !strings.Contains(ended.Reason, "laptop stolen") {
		t.Errorf("the developer reads: %v", s.Err())
	}
	clustertest.Until(t, clustertest.Settle, "web given back", func() bool { _, held := platform.Held("web"); return !held })
	_, err = tunnel.Connect(ctx, devCfg)
	if err == nil || !strings.Contains(err.Error(), "denied by root") || !strings.Contains(err.Error(), "undeny "+devFP) {
		t.Errorf("the denied key's next connection: %v", err)
	}
	if _, _, err := tunnel.ManageMembers(ctx, adminCfg, "deny", devFP, ""); err == nil || !strings.Contains(err.Error(), "denied already") {
		t.Errorf("denying twice: %v", err)
	}
	l, _, err := tunnel.ManageMembers(ctx, adminCfg, "list", "", "")
	if err != nil || len(l.Denied) != 1 || l.Denied[0].Key != devFP || l.Denied[0].Reason != "laptop stolen" || !strings.HasPrefix(l.Denied[0].By, "root (SHA256:") {
		t.Errorf("the list: %+v %v", l.Denied, err)
	}

	// The operator lifts it; the key gets in again.
	if _, err := tunnel.Apply(ctx, platform, tunnel.MemberChange{Op: "undeny", Key: devFP, By: "the operator"}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, clustertest.Settle, "the key let in again", func() error {
		s, err := tunnel.Connect(ctx, devCfg)
		if err == nil {
			s.Close()
		}
		return err
	})

	denied := audit.Await(t, clustertest.Settle, "key.denied", func(e tunnel.AuditEvent) bool { return e.Event == tunnel.AuditKeyDenied })
	if denied.Key != devFP || !strings.HasPrefix(denied.By, "root (SHA256:") || denied.Reason != "laptop stolen" || denied.UserAsserted {
		t.Errorf("key.denied: %+v", denied)
	}
	e := audit.Await(t, clustertest.Settle, "run.ended", func(e tunnel.AuditEvent) bool { return e.Event == tunnel.AuditRunEnded && e.Key == devFP })
	if e.How != tunnel.EndKeyRemoved || !strings.HasPrefix(e.By, "root (SHA256:") || !e.UserAsserted {
		t.Errorf("the denied run's run.ended: %+v", e)
	}
	x := scrape(t, ml.Addr().String())
	if x.samples[`plug_refusals_total{reason="denied"}`] < 1 {
		t.Errorf("the denied key's refusal is not counted: %v", x.find("plug_refusals_total"))
	}
}
