package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"plug/keys"
)

// The host key is made once, kept private, and the same on every start.
func TestHostKeyIsPersisted(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	first, err := loadOrCreateHostKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if first.PublicKey().Type() != "ssh-ed25519" {
		t.Errorf("host key type %s, want ssh-ed25519", first.PublicKey().Type())
	}
	info, err := os.Stat(filepath.Join(dir, "ssh_host_ed25519_key"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v, mode %v; want 0600", err, info.Mode().Perm())
	}
	again, err := loadOrCreateHostKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first.PublicKey().Marshal(), again.PublicKey().Marshal()) {
		t.Error("a second start made a new host key")
	}
}

// A damaged key file is reported, not replaced.
func TestDamagedHostKeyIsReported(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ssh_host_ed25519_key")
	if err := os.WriteFile(path, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadOrCreateHostKey(dir); err == nil {
		t.Fatal("a damaged host key was accepted")
	}
	if data, _ := os.ReadFile(path); string(data) != "garbage" {
		t.Error("the damaged host key was replaced")
	}
}

func TestListenAddr(t *testing.T) {
	t.Setenv("PLUG_ADDR", "")
	t.Setenv("MEERKAT_PLUG_ADDR", "")
	if got := listenAddr(); got != ":2222" {
		t.Errorf("default %q", got)
	}
	t.Setenv("MEERKAT_PLUG_ADDR", ":22222")
	if got := listenAddr(); got != ":22222" {
		t.Errorf("with MEERKAT_PLUG_ADDR: %q", got)
	}
	t.Setenv("PLUG_ADDR", "127.0.0.1:2200")
	if got := listenAddr(); got != "127.0.0.1:2200" {
		t.Errorf("with PLUG_ADDR: %q", got)
	}
}

// plug agent host-key rotate (an agent keeping its key in PLUG_STATE_DIR)
// replaces the key, prints the new one and what developers run; the next
// start presents it.
func TestAgentHostKeyRotate(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PLUG_PLATFORM", "memory")
	t.Setenv("PLUG_STATE_DIR", dir)
	t.Setenv("PLUG_PUBLIC_ADDR", "plug.example:32222")
	old, err := loadOrCreateHostKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	code, out, stderr := plug(t, "agent", "host-key", "rotate")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, stderr)
	}
	now, err := loadOrCreateHostKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(now.PublicKey().Marshal(), old.PublicKey().Marshal()) {
		t.Fatal("the host key is the same after rotate")
	}
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(now.PublicKey())))
	fp := keys.Fingerprint(now.PublicKey())
	for _, want := range []string{
		line + "\n",
		"The agent's host key is now " + fp + " (it was " + keys.Fingerprint(old.PublicKey()) + ")",
		"plug profile add PROFILE --host plug.example --port 32222 --host-key '" + line + "' --force",
		"ssh -p 32222 get@plug.example install | sh -s -- --fingerprint " + fp,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rotate does not say %q:\n%s", want, out)
		}
	}
	if code, _, stderr := plug(t, "agent", "host-key", "rotat"); code != ExitUsage || !strings.Contains(stderr, "rotate") {
		t.Errorf("a misspelt word: exit %d\n%s", code, stderr)
	}
}
