package cli

import (
	"os/exec"
	"strings"
	"testing"

	"plug/keys"
)

func TestKeygenPubkeyLs(t *testing.T) {
	h := newHome(t)
	h.profile("prod", false)

	code, stdout, _ := plug(t, "ls")
	if code != 0 || !strings.Contains(stdout, "prod") || !strings.Contains(stdout, "no key yet") {
		t.Errorf("ls before keygen: exit %d\n%s", code, stdout)
	}

	code, stdout, stderr := plug(t, "keygen", "-p", "prod")
	if code != 0 {
		t.Fatalf("keygen: exit %d\n%s", code, stderr)
	}
	pub, comment, err := h.store.PublicKey("prod")
	if err != nil {
		t.Fatal(err)
	}
	fp := keys.Fingerprint(pub)
	if !strings.Contains(stdout, fp) || !strings.Contains(stdout, "plug pubkey -p prod") {
		t.Errorf("keygen prints no fingerprint or next step:\n%s", stdout)
	}

	// pubkey: the authorized_keys line on stdout, the fingerprint on stderr,
	// the same one ssh-keygen computes.
	code, stdout, stderr = plug(t, "pubkey") // the only profile
	if code != 0 {
		t.Fatalf("pubkey: exit %d\n%s", code, stderr)
	}
	if want := keys.AuthorizedKey(pub) + " " + comment + "\n"; stdout != want {
		t.Errorf("pubkey stdout %q, want %q", stdout, want)
	}
	cmd := exec.Command("ssh-keygen", "-l", "-E", "sha256", "-f", "-")
	cmd.Stdin = strings.NewReader(stdout)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, strings.Fields(string(out))[1]) {
		t.Errorf("pubkey stderr %q lacks the fingerprint ssh-keygen prints: %s", stderr, out)
	}

	code, stdout, _ = plug(t, "ls")
	if code != 0 || !strings.Contains(stdout, fp) || !strings.Contains(stdout, h.host) {
		t.Errorf("ls after keygen: exit %d\n%s", code, stdout)
	}

	// A second keygen is refused and keeps the key; --force replaces it.
	code, _, stderr = plug(t, "keygen", "-p", "prod")
	if code != ExitFailed || !strings.Contains(stderr, "already has a key pair "+fp) || !strings.Contains(stderr, "--force") {
		t.Errorf("second keygen: exit %d\n%s", code, stderr)
	}
	if again, _, _ := h.store.PublicKey("prod"); keys.Fingerprint(again) != fp {
		t.Error("a refused keygen replaced the key")
	}
	if code, _, stderr = plug(t, "keygen", "-p", "prod", "--force"); code != 0 {
		t.Errorf("keygen --force: exit %d\n%s", code, stderr)
	}
	if again, _, _ := h.store.PublicKey("prod"); keys.Fingerprint(again) == fp {
		t.Error("keygen --force kept the key")
	}
}

func TestKeyCommandsRefusals(t *testing.T) {
	h := newHome(t)
	h.profile("a", false)
	h.profile("b", false)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"keygen"}, ExitUsage, "there are 2 profiles (a, b)"},
		{[]string{"keygen", "-p", "c"}, ExitUsage, `no profile "c"`},
		{[]string{"keygen", "-p", "a", "extra"}, ExitUsage, `got "extra"`},
		{[]string{"pubkey", "-p", "a"}, ExitFailed, "plug keygen -p a"},
		{[]string{"rn", "a"}, ExitUsage, "two profile names"},
		{[]string{"rn", "a", "b"}, ExitFailed, "nothing was renamed"},
		{[]string{"rn", "x", "y"}, ExitUsage, `no profile "x"`},
		{[]string{"rn", "a", "a/b"}, ExitUsage, keys.NameForm},
		{[]string{"ls", "x"}, ExitUsage, "ls takes no arguments"},
		{[]string{"version", "x"}, ExitUsage, "takes no arguments"},
		{[]string{"profile"}, ExitUsage, "plug profile add NAME"},
		{[]string{"profile", "add", "c", "--host", "h", "--port", "0", "--host-key", h.hostKey}, ExitUsage, "port 0"},
		{[]string{"profile", "add", "c", "--host", "h", "--port", "22", "--host-key", "junk"}, ExitUsage, "authorized_keys form"},
		{[]string{"profile", "add", "c", "--host", "h", "--port", "22"}, ExitUsage, "no host key given"},
		{[]string{"profile", "add", "--host", "h", "--port", "22", "--host-key", h.hostKey}, ExitUsage, "one profile name"},
		{[]string{"profile", "add", "A", "--host", "h", "--port", "22", "--host-key", h.hostKey}, ExitFailed, "differing only in case"},
	} {
		before := snapshot(t, h.store.Dir())
		code, _, stderr := plug(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("plug %q: exit %d, want %d with %q; stderr:\n%s", tc.args, code, tc.code, tc.want, stderr)
		}
		if after := snapshot(t, h.store.Dir()); after != before {
			t.Errorf("plug %q changed ~/.plug", tc.args)
		}
	}
}

func TestRnMovesKeyPair(t *testing.T) {
	h := newHome(t)
	h.profile("gw.example.com", true)
	pub, _, _ := h.store.PublicKey("gw.example.com")
	if code, _, stderr := plug(t, "rn", "gw.example.com", "prod"); code != 0 {
		t.Fatalf("rn: exit %d\n%s", code, stderr)
	}
	moved, _, err := h.store.PublicKey("prod")
	if err != nil || keys.Fingerprint(moved) != keys.Fingerprint(pub) {
		t.Errorf("after rn the key of prod is %v, %v", moved, err)
	}
	if _, err := h.store.Profile("gw.example.com"); err == nil {
		t.Error("the old profile is still there")
	}
}

func TestProfileAdd(t *testing.T) {
	h := newHome(t)
	// The installer's exact form.
	code, _, stderr := plug(t, "profile", "add", "gw.example.com", "--host", "gw.example.com", "--port", "22222", "--host-key", h.hostKey+" plug agent host key")
	if code != 0 || !strings.Contains(stderr, "profile gw.example.com added") {
		t.Fatalf("profile add: exit %d\n%s", code, stderr)
	}
	p, err := h.store.Profile("gw.example.com")
	if err != nil || p.Addr() != "gw.example.com:22222" || p.HostKey != h.hostKey {
		t.Fatalf("profile %+v, %v", p, err)
	}
	// The same again is fine; another host key needs --force.
	if code, _, stderr := plug(t, "profile", "add", "gw.example.com", "--host", "gw.example.com", "--port", "22222", "--user", "me", "--host-key", h.hostKey); code != 0 {
		t.Errorf("re-adding with the same key: exit %d\n%s", code, stderr)
	}
	other := newHome(t).hostKey
	t.Setenv("PLUG_HOME", h.store.Dir())
	code, _, stderr = plug(t, "profile", "add", "gw.example.com", "--host", "gw.example.com", "--port", "22222", "--host-key", other)
	if code != ExitFailed || !strings.Contains(stderr, "--force") || !strings.Contains(stderr, "the pinned key was kept") {
		t.Errorf("another host key without --force: exit %d\n%s", code, stderr)
	}
	if p, _ := h.store.Profile("gw.example.com"); p.HostKey != h.hostKey || p.User != "me" {
		t.Errorf("a refused profile add changed the profile: %+v", p)
	}
	code, _, stderr = plug(t, "profile", "add", "gw.example.com", "--force", "--host", "gw.example.com", "--port", "22222", "--host-key", other)
	if code != 0 || !strings.Contains(stderr, "now pins host key") {
		t.Errorf("--force: exit %d\n%s", code, stderr)
	}
	if p, _ := h.store.Profile("gw.example.com"); p.HostKey != other {
		t.Error("--force did not pin the new key")
	}
}
