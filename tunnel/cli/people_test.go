package cli

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"plug/keys"
	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// Bad member and end commands are refused before anything is contacted,
// saying what is wrong.
func TestPeopleCommandsRefuseBadInput(t *testing.T) {
	doctorHome(t, tunneltest.NewPlatform())
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"members", "accept", "-p", "kube", "SHA256:nope"}, "is not a key's fingerprint"},
		{[]string{"members", "remove", "-p", "kube"}, "takes one key fingerprint"},
		{[]string{"members", "frob", "-p", "kube"}, `"frob" is not accept, refuse, remove, deny or undeny`},
		{[]string{"members", "accept", "-p", "kube", "SHA256:" + strings.Repeat("A", 43), "--reason", "x"}, "--reason goes with remove and deny only"},
		{[]string{"end", "-p", "kube", "abcdef"}, "end needs --reason TEXT"},
		{[]string{"end", "-p", "kube", "--reason", "x"}, "end takes one run id"},
		{[]string{"agent", "members", "add", "--user", "bob", "not a key"}, "is not a public key"},
		{[]string{"agent", "members", "reset"}, "give --yes"},
		{[]string{"agent", "members", "remove", "SHA256:short"}, "is not a key's fingerprint"},
		{[]string{"members", "deny", "-p", "kube"}, "takes one key fingerprint"},
		{[]string{"agent", "members", "deny", "SHA256:short"}, "is not a key's fingerprint"},
		{[]string{"agent", "members", "undeny", "--reason", "x", "SHA256:" + strings.Repeat("A", 43)}, "--reason goes with remove and deny only"},
	} {
		code, _, stderr := plug(t, tc.args...)
		if code != ExitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("plug %s: exit %d, %q; want exit 2 saying %q", strings.Join(tc.args, " "), code, stderr, tc.want)
		}
	}
}

// With admission by approval, a member lists the members, sees who is
// plugged in and ends a run; a bad change is refused and changes nothing.
func TestMembersWhoAndEndCommands(t *testing.T) {
	platform := tunneltest.NewPlatform()
	store := doctorHome(t, platform, func(a *tunnel.Agent) { a.Keys = tunnel.NewMembers(platform, true) })
	prof, _ := store.Profile("kube")
	pub, _, _ := store.PublicKey("kube")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := tunnel.Apply(ctx, platform, tunnel.MemberChange{Op: "add", PublicKey: pub, User: userFor(prof), Comment: "dev@test", By: "the operator"}); err != nil {
		t.Fatal(err)
	}
	var out string
	clustertest.Until(t, clustertest.Settle, "the member let in", func() bool {
		var code int
		code, out, _ = plug(t, "members", "-p", "kube")
		return code == 0
	})
	if !strings.Contains(out, keys.Fingerprint(pub)) || !strings.Contains(out, "the operator") {
		t.Errorf("plug members:\n%s", out)
	}
	before, _ := platform.LoadMembers(ctx)
	code, _, stderr := plug(t, "members", "remove", "-p", "kube", "SHA256:"+strings.Repeat("A", 43))
	if code != ExitFailed || !strings.Contains(stderr, "is not a member") || !strings.Contains(stderr, "nothing was changed") {
		t.Errorf("removing a key that is not a member: exit %d, %q", code, stderr)
	}
	if after, _ := platform.LoadMembers(ctx); len(after.Members) != len(before.Members) || len(after.Removed) != 0 {
		t.Errorf("a refused change changed the list: %+v", after)
	}

	signer, _ := store.Signer("kube")
	hostKey, _ := prof.PinnedKey()
	s, err := tunnel.Connect(ctx, tunnel.ClientConfig{Addr: prof.Addr(), User: userFor(prof), Signer: signer, HostKey: hostKey,
		Run: tunnel.RunInfo{ID: "0123456789abcdef0123456789abcdef", Serves: true, Comment: "dev@test"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	code, out, _ = plug(t, "who", "-p", "kube")
	if code != 0 || !strings.Contains(out, "0123456789abcdef0123456789abcdef") || !strings.Contains(out, "nothing served yet") || !strings.Contains(out, "dev@test") {
		t.Errorf("plug who: exit %d\n%s", code, out)
	}
	code, _, stderr = plug(t, "end", "-p", "kube", "01234567", "--reason", "lunch")
	if code != 0 || !strings.Contains(stderr, "ended run 0123456789abcdef0123456789abcdef") {
		t.Errorf("plug end: exit %d, %q", code, stderr)
	}
	select {
	case <-s.Done():
	case <-time.After(clustertest.Settle):
		t.Fatal("the run goes on after plug end")
	}
	if !strings.Contains(s.Err().Error(), "lunch") {
		t.Errorf("the developer reads: %v", s.Err())
	}
}

// plug who shows a personal takeover's filter beside the name.
func TestWhoShowsAPersonalTakeoversFilter(t *testing.T) {
	var out strings.Builder
	now := time.Now()
	writeWho(&out, []tunnel.Plugged{{Run: "run-1", User: "alice", Key: "SHA256:a", Kind: tunnel.KindServes, Since: now,
		Names: []tunnel.RecordName{{Name: "shop", Port: 80, Mode: tunnel.ModeParked, Filter: "header X-Dev=alice"}, {Name: "web", Port: 80, Mode: tunnel.ModeParked}}}}, now)
	if want := "shop:80 parked (personal: header X-Dev=alice), web:80 parked"; !strings.Contains(out.String(), want) {
		t.Errorf("plug who printed\n%s\nwant %q in it", out.String(), want)
	}
}

// With open admission plug who shows the key first and the account as
// asserted; the denied keys are listed by plug members.
func TestWhoMarksAnAssertedUserAndMembersListDenials(t *testing.T) {
	var out strings.Builder
	now := time.Now()
	writeWho(&out, []tunnel.Plugged{
		{Run: "run-1", User: "alice", UserAsserted: true, Key: "SHA256:a", Kind: tunnel.KindConsumes, Since: now},
		{Run: "run-2", User: "bob", Key: "SHA256:b", Kind: tunnel.KindConsumes, Since: now},
	}, now)
	if !strings.Contains(out.String(), "SHA256:a alice (asserted)") || !strings.Contains(out.String(), "bob SHA256:b") || strings.Contains(out.String(), "bob (asserted)") {
		t.Errorf("plug who printed\n%s", out.String())
	}
	out.Reset()
	writeMembers(&out, tunnel.MemberList{Denied: []tunnel.Denial{{Key: "SHA256:d", By: "the operator", Reason: "laptop stolen", At: now}}}, now)
	if !strings.Contains(out.String(), "DENIED") || !regexp.MustCompile(`SHA256:d\s+the operator\s+\S+.*laptop stolen`).MatchString(out.String()) {
		t.Errorf("plug members printed\n%s", out.String())
	}
}
