package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
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
