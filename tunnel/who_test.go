package tunnel_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/keys"
	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// twoReplicas starts two agents sharing one platform, as two replicas of
// one cluster, with keys.
func twoReplicas(t *testing.T, platform *tunneltest.Platform, k tunnel.Keys) (addrA, addrB string, hostKeyA, hostKeyB ssh.PublicKey) {
	addrA, hostKeyA, _ = tunneltest.StartAgent(t, platform, func(a *tunnel.Agent) { a.ID, a.Keys = "agent-a", k })
	addrB, hostKeyB, _ = tunneltest.StartAgent(t, platform, func(a *tunnel.Agent) { a.ID, a.Keys = "agent-b", k })
	return
}

// A run with connections on two replicas is one row of plug who on either;
// plug end on either ends it, and every name it served is given back.
func TestWhoAndEndAcrossReplicas(t *testing.T) {
	platform := tunneltest.NewPlatform()
	platform.AddWorkload("web:80", "127.0.0.1:1")
	admin, _ := newKey(t)
	addrA, addrB, hostA, hostB := twoReplicas(t, platform, tunneltest.Overseers{keys.Fingerprint(admin.PublicKey())})
	dev, _ := newKey(t)
	run := tunnel.RunInfo{ID: "run-on-two-replicas", Version: "v2.30.0", Serves: true, Comment: "dev@laptop"}
	onA, _ := connect(t, addrA, hostA, dev, run)
	onB, _ := connect(t, addrB, hostB, dev, run)
	ctx := ctxFor(t, 20*time.Second)
	if _, err := onA.Serve(ctx, "web", 80, echoServer(t, "")); err != nil {
		t.Fatal(err)
	}
	if _, err := onB.Serve(ctx, "api", 8080, echoServer(t, "")); err != nil {
		t.Fatal(err)
	}

	for _, addr := range []string{addrA, addrB} {
		host := hostA
		if addr == addrB {
			host = hostB
		}
		cfg := tunnel.ClientConfig{Addr: addr, User: "admin", Signer: admin, HostKey: host}
		var runs []tunnel.Plugged
		clustertest.Until(t, clustertest.Settle, "one row with both names", func() bool {
			var err error
			runs, _, err = tunnel.Who(ctx, cfg)
			return err == nil && len(runs) == 1 && len(runs[0].Names) == 2
		})
		r := runs[0]
		if r.Run != run.ID || r.User != "dev" || r.Key != keys.Fingerprint(dev.PublicKey()) || r.Comment != "dev@laptop" ||
			r.Version != "v2.30.0" || r.What() != "serving" || !slices.Equal(r.Agents, []string{"agent-a", "agent-b"}) || len(r.From) != 2 {
			t.Errorf("who on %s: %+v", addr, r)
		}
		if r.Names[0].Name != "api" || r.Names[0].Mode != tunnel.ModeAdded || r.Names[1].Name != "web" || r.Names[1].Mode != tunnel.ModeParked {
			t.Errorf("names: %+v", r.Names)
		}
	}

	// The developer's own key sees its run; a stranger sees nothing and
	// may not end it.
	stranger, _ := newKey(t)
	strangerCfg := tunnel.ClientConfig{Addr: addrB, User: "eve", Signer: stranger, HostKey: hostB}
	if runs, all, err := tunnel.Who(ctx, strangerCfg); err != nil || all || len(runs) != 0 {
		t.Errorf("a stranger's who: %v %v %v", runs, all, err)
	}
	if _, err := tunnel.End(ctx, strangerCfg, run.ID, "mine now"); err == nil || !strings.Contains(err.Error(), "no run run-on-two-replicas of your key") {
		t.Errorf("a stranger's end: %v", err)
	}
	if runs, all, err := tunnel.Who(ctx, tunnel.ClientConfig{Addr: addrA, User: "dev", Signer: dev, HostKey: hostA}); err != nil || all || len(runs) != 1 {
		t.Errorf("the developer's own who: %v %v %v", runs, all, err)
	}

	start := time.Now()
	ended, err := tunnel.End(ctx, tunnel.ClientConfig{Addr: addrB, User: "admin", Signer: admin, HostKey: hostB}, "run-on-two", "the demo starts")
	if err != nil || ended.Run != run.ID || ended.User != "dev" {
		t.Fatalf("end: %+v %v", ended, err)
	}
	for _, s := range []*tunnel.Session{onA, onB} {
		select {
		case <-s.Done():
		case <-time.After(clustertest.Settle):
			t.Fatal("a session of the ended run goes on")
		}
		var e *tunnel.EndedError
		if !errors.As(s.Err(), &e) || e.Reason != "the demo starts" || !strings.HasPrefix(e.By, "admin (SHA256:") {
			t.Errorf("the developer reads: %v", s.Err())
		}
	}
	clustertest.Until(t, clustertest.Settle, "every name given back", func() bool {
		_, web := platform.Held("web")
		_, api := platform.Held("api")
		return !web && !api
	})
	t.Logf("ended and given back in %s", time.Since(start))
	clustertest.Until(t, clustertest.Settle, "the run gone from who", func() bool {
		runs, _, err := tunnel.Who(ctx, tunnel.ClientConfig{Addr: addrA, User: "admin", Signer: admin, HostKey: hostA})
		return err == nil && len(runs) == 0
	})
	// Not a ban: the same key plugs in again.
	again, _ := connect(t, addrA, hostA, dev, tunnel.RunInfo{Serves: true})
	if _, err := again.Serve(ctx, "web", 80, echoServer(t, "")); err != nil {
		t.Errorf("a new run after the end: %v", err)
	}
}

// plug end refuses what is not one run, and ends nothing.
func TestEndRefusals(t *testing.T) {
	platform := tunneltest.NewPlatform()
	addr, hostKey, _ := tunneltest.StartAgent(t, platform)
	dev, _ := newKey(t)
	connect(t, addr, hostKey, dev, tunnel.RunInfo{ID: "abcdef-1"})
	connect(t, addr, hostKey, dev, tunnel.RunInfo{ID: "abcdef-2"})
	cfg := tunnel.ClientConfig{Addr: addr, User: "dev", Signer: dev, HostKey: hostKey}
	ctx := ctxFor(t, 20*time.Second)
	for _, tc := range []struct{ run, reason, want string }{
		{"abc", "x", "too short"},
		{"abcdef", "x", "several runs"},
		{"zzzzzz", "x", "no run zzzzzz of your key"},
		{"abcdef-1", "", "a reason is required"},
		{"abcdef-1", "two\nlines", "one line"},
		{"abcdef 1", "x", "may hold only"},
	} {
		if _, err := tunnel.End(ctx, cfg, tc.run, tc.reason); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("end %q %q: %v, want %q", tc.run, tc.reason, err, tc.want)
		}
	}
	clustertest.Until(t, clustertest.Settle, "both runs listed", func() bool {
		runs, _, err := tunnel.Who(ctx, cfg)
		return err == nil && len(runs) == 2 && runs[0].What() == "client only"
	})
}

// An answer larger than one control message comes in parts: plug who of
// 600 runs, and the list of 1000 members, arrive whole.
func TestLongAnswersComeInParts(t *testing.T) {
	platform := tunneltest.NewPlatform()
	admin, _ := newKey(t)
	fp := keys.Fingerprint(admin.PublicKey())
	ctx := ctxFor(t, 30*time.Second)
	if _, err := tunnel.Apply(ctx, platform, tunnel.MemberChange{Op: "add", PublicKey: admin.PublicKey(), User: "admin", By: "the operator"}); err != nil {
		t.Fatal(err)
	}
	_, err := platform.UpdateMembers(ctx, func(l *tunnel.MemberList) error {
		for i := range tunnel.MaxMembers - 1 {
			pub, _, _ := ed25519.GenerateKey(rand.Reader)
			k, _ := ssh.NewPublicKey(pub)
			l.Members = append(l.Members, tunnel.Member{Key: keys.Fingerprint(k), PublicKey: keys.AuthorizedKey(k), User: fmt.Sprintf("dev%d", i), By: "the operator", Since: time.Now()})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 600 {
		rec := tunnel.RunRecord{Run: fmt.Sprintf("run-%04d", i), Agent: "agent-elsewhere", User: "dev", Key: fp, From: "10.0.0.1:1234",
			Kind: tunnel.KindServes, Since: time.Now(), Names: []tunnel.RecordName{{Name: "web", Port: 80, Mode: tunnel.ModeParked}}}
		if err := platform.PutRun(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	addr, hostKey, _ := tunneltest.StartAgent(t, platform, func(a *tunnel.Agent) { a.Keys = tunnel.NewMembers(platform, true) })
	cfg := tunnel.ClientConfig{Addr: addr, User: "admin", Signer: admin, HostKey: hostKey}
	var runs []tunnel.Plugged
	clustertest.Until(t, clustertest.Settle, "who of 600 runs", func() bool {
		var err error
		runs, _, err = tunnel.Who(ctx, cfg)
		return err == nil
	})
	if len(runs) != 600 {
		t.Errorf("who: %d runs, want 600", len(runs))
	}
	l, _, err := tunnel.ManageMembers(ctx, cfg, "list", "", "")
	if err != nil || len(l.Members) != tunnel.MaxMembers {
		t.Errorf("members: %d, %v", len(l.Members), err)
	}
}
