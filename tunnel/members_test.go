package tunnel_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"plug/keys"
	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// Acceptance 1 without a cluster: with admission by approval a stranger's
// key is refused with the command that accepts it; a member accepts it;
// the stranger's next run gets in; the member removes it, and the
// stranger's running session ends within 5 s, saying who removed it and
// why, its takeover given back.
func TestAdmissionByApproval(t *testing.T) {
	platform := tunneltest.NewPlatform()
	platform.AddWorkload("web:80", "127.0.0.1:1")
	alice, _ := newKey(t)
	ctx := ctxFor(t, 30*time.Second)
	if _, err := tunnel.Apply(ctx, platform, tunnel.MemberChange{Op: "add", PublicKey: alice.PublicKey(), User: "alice", By: "the operator"}); err != nil {
		t.Fatal(err)
	}
	audit := tunneltest.NewAudit()
	addr, hostKey, _ := tunneltest.StartAgent(t, platform, func(a *tunnel.Agent) {
		a.Keys, a.Audit = tunnel.NewMembers(platform, true), audit.Sink
	})
	aliceCfg := tunnel.ClientConfig{Addr: addr, User: "alice", Signer: alice, HostKey: hostKey, Profile: "prod"}
	clustertest.Until(t, clustertest.Settle, "alice let in", func() bool { _, _, err := tunnel.Who(ctx, aliceCfg); return err == nil })

	bob, _ := newKey(t)
	bobFP := keys.Fingerprint(bob.PublicKey())
	bobCfg := tunnel.ClientConfig{Addr: addr, User: "bob", Signer: bob, HostKey: hostKey, Profile: "prod", Run: tunnel.RunInfo{Serves: true}}
	_, err := tunnel.Connect(ctx, bobCfg)
	var auth *tunnel.AuthError
	if !errors.As(err, &auth) || !strings.Contains(err.Error(), "plug members accept -p PROFILE "+bobFP) {
		t.Fatalf("a stranger's run: %v", err)
	}
	var l tunnel.MemberList
	clustertest.Until(t, clustertest.Settle, "bob's request pending", func() bool {
		l, _, err = tunnel.ManageMembers(ctx, aliceCfg, "list", "", "")
		return err == nil && len(l.Pending) == 1
	})
	if r := l.Pending[0]; r.Key != bobFP || r.User != "bob" || !strings.HasPrefix(r.From, "127.0.0.1:") {
		t.Errorf("the pending request: %+v", r)
	}

	// Bad member commands change nothing.
	for _, tc := range []struct{ op, key, want string }{
		{"accept", "SHA256:nope", "is not a key's fingerprint"},
		{"accept", keys.Fingerprint(alice.PublicKey()), "is a member already"},
		{"remove", bobFP, "is not a member"},
		{"refuse", keys.Fingerprint(alice.PublicKey()), "has no pending request"},
		{"remove", keys.Fingerprint(alice.PublicKey()), "the last member"},
		{"accept", "SHA256:" + strings.Repeat("A", 43), "has no pending request"},
	} {
		if _, _, err := tunnel.ManageMembers(ctx, aliceCfg, tc.op, tc.key, ""); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("members %s %s: %v, want %q", tc.op, tc.key, err, tc.want)
		}
	}
	if after, _ := platform.LoadMembers(ctx); !reflect.DeepEqual(after, l) {
		t.Errorf("a refused change changed the list:\n%+v\n%+v", after, l)
	}

	if _, done, err := tunnel.ManageMembers(ctx, aliceCfg, "accept", bobFP, ""); err != nil || !strings.Contains(done, "accepted "+bobFP+" for bob") {
		t.Fatalf("accept: %q %v", done, err)
	}
	var s *tunnel.Session
	clustertest.Until(t, clustertest.Settle, "bob let in", func() bool {
		s, err = tunnel.Connect(ctx, bobCfg)
		return err == nil
	})
	defer s.Close()
	if _, err := s.Serve(ctx, "web", 80, echoServer(t, "")); err != nil {
		t.Fatal(err)
	}
	// One key, one account: bob's key as another user is refused.
	_, err = tunnel.Connect(ctx, tunnel.ClientConfig{Addr: addr, User: "mallory", Signer: bob, HostKey: hostKey})
	if err == nil || !strings.Contains(err.Error(), "belongs to the account bob") {
		t.Errorf("bob's key as mallory: %v", err)
	}

	start := time.Now()
	if _, _, err := tunnel.ManageMembers(ctx, aliceCfg, "remove", bobFP, "left the team"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(clustertest.Settle):
		t.Fatal("bob's run goes on after his key was removed")
	}
	var ended *tunnel.EndedError
	if !errors.As(s.Err(), &ended) || !strings.HasPrefix(ended.By, "alice (SHA256:") || !strings.Contains(ended.Reason, "removed from the members by alice") || !strings.Contains(ended.Reason, "left the team") {
		t.Errorf("bob reads: %v", s.Err())
	}
	// README: removing a key ends what it has open "at once"; in process
	// nothing but plug takes part, so the bound is a few seconds.
	clustertest.Until(t, 5*time.Second-time.Since(start), "the agent to give web back", func() bool { _, held := platform.Held("web"); return !held })
	t.Logf("bob's run ended and web given back %s after the removal", time.Since(start).Round(time.Millisecond))
	if _, err := tunnel.Connect(ctx, bobCfg); err == nil || !strings.Contains(err.Error(), "removed from the members by alice") {
		t.Errorf("bob's next try: %v", err)
	}

	for _, want := range []struct{ event, by string }{
		{tunnel.AuditRunRefused, ""}, {tunnel.AuditKeyRequest, ""}, {tunnel.AuditKeyAccepted, "alice (SHA256:"}, {tunnel.AuditKeyRemoved, "alice (SHA256:"},
	} {
		e := audit.Await(t, clustertest.Settle, want.event, func(e tunnel.AuditEvent) bool { return e.Event == want.event })
		if e.Key != bobFP || e.User != "bob" || !strings.HasPrefix(e.By, want.by) {
			t.Errorf("%s: %+v", want.event, e)
		}
	}
	e := audit.Await(t, clustertest.Settle, "run.ended", func(e tunnel.AuditEvent) bool { return e.Event == tunnel.AuditRunEnded && e.Key == bobFP })
	if e.How != tunnel.EndKeyRemoved || !strings.HasPrefix(e.By, "alice (SHA256:") {
		t.Errorf("bob's run.ended: %+v", e)
	}
}
