package keys

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// hostKey is an agent host key in authorized_keys form, for profiles.
func hostKey(t *testing.T) string {
	t.Helper()
	store := Open(t.TempDir())
	pub, err := store.GenerateKey("agent", "", false)
	if err != nil {
		t.Fatal(err)
	}
	return AuthorizedKey(pub)
}

func newStore(t *testing.T) Store {
	t.Helper()
	return Open(filepath.Join(t.TempDir(), ".plug"))
}

func addProfile(t *testing.T, s Store, name string) Profile {
	t.Helper()
	p := Profile{Name: name, Host: "agent.example", Port: 32222, User: "dev", HostKey: hostKey(t)}
	if err := s.AddProfile(p, false); err != nil {
		t.Fatal(err)
	}
	return p
}

func wantMode(t *testing.T, path string, want fs.FileMode) {
	t.Helper()
	if runtime.GOOS == "windows" {
		return
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("%s has mode %v, want %v", path, got, want)
	}
}

func TestGenerateKeyModesAndOpenSSH(t *testing.T) {
	s := newStore(t)
	pub, err := s.GenerateKey("prod", "me@laptop", false)
	if err != nil {
		t.Fatal(err)
	}
	wantMode(t, s.Dir(), 0o700)
	wantMode(t, filepath.Join(s.Dir(), "keys"), 0o700)
	wantMode(t, s.KeyPath("prod"), 0o600)
	wantMode(t, s.KeyPath("prod")+".pub", 0o644)

	// ssh-keygen reads the private key (-y derives the public key from it)
	// and prints the same fingerprint as ours for the public one.
	out, err := exec.Command("ssh-keygen", "-y", "-f", s.KeyPath("prod")).Output()
	if err != nil {
		t.Fatalf("ssh-keygen -y cannot read the private key: %v", err)
	}
	if got := strings.Fields(string(out))[1]; got != strings.Fields(AuthorizedKey(pub))[1] {
		t.Errorf("ssh-keygen -y derives %s, want %s", got, AuthorizedKey(pub))
	}
	out, err = exec.Command("ssh-keygen", "-l", "-E", "sha256", "-f", s.KeyPath("prod")+".pub").Output()
	if err != nil {
		t.Fatal(err)
	}
	// "256 SHA256:... me@laptop (ED25519)"
	fields := strings.Fields(string(out))
	if fields[1] != Fingerprint(pub) {
		t.Errorf("ssh-keygen -l prints %s, Fingerprint gives %s", fields[1], Fingerprint(pub))
	}
	if fields[2] != "me@laptop" {
		t.Errorf("ssh-keygen -l shows comment %q, want me@laptop", fields[2])
	}

	signer, err := s.Signer("prod")
	if err != nil {
		t.Fatal(err)
	}
	if Fingerprint(signer.PublicKey()) != Fingerprint(pub) {
		t.Error("the signer's public key differs from the generated one")
	}
	readPub, comment, err := s.PublicKey("prod")
	if err != nil || Fingerprint(readPub) != Fingerprint(pub) || comment != "me@laptop" {
		t.Errorf("PublicKey = %v %q %v", readPub, comment, err)
	}
}

func TestGenerateKeyRefusesToOverwrite(t *testing.T) {
	s := newStore(t)
	first, err := s.GenerateKey("prod", "", false)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.GenerateKey("prod", "", false)
	var exists *ExistsError
	if !errors.As(err, &exists) {
		t.Fatalf("second GenerateKey: %v, want *ExistsError", err)
	}
	if pub, _, _ := s.PublicKey("prod"); Fingerprint(pub) != Fingerprint(first) {
		t.Error("a refused GenerateKey changed the key")
	}
	second, err := s.GenerateKey("prod", "", true)
	if err != nil {
		t.Fatal(err)
	}
	if Fingerprint(second) == Fingerprint(first) {
		t.Error("GenerateKey with force kept the old key")
	}
	wantMode(t, s.KeyPath("prod"), 0o600)
}

func TestMissingKey(t *testing.T) {
	s := newStore(t)
	_, err := s.Signer("prod")
	var nokey *NoKeyError
	if !errors.As(err, &nokey) || nokey.Path != s.KeyPath("prod") {
		t.Errorf("Signer of a missing key: %v, want *NoKeyError for %s", err, s.KeyPath("prod"))
	}
	_, _, err = s.PublicKey("prod")
	if !errors.As(err, &nokey) {
		t.Errorf("PublicKey of a missing key: %v, want *NoKeyError", err)
	}
}

func TestProfileRoundTripAndModes(t *testing.T) {
	s := newStore(t)
	p := addProfile(t, s, "gw.example.com")
	wantMode(t, filepath.Join(s.Dir(), "profiles"), 0o700)
	wantMode(t, s.ProfilePath(p.Name), 0o600)
	got, err := s.Profile("gw.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if got != p {
		t.Errorf("read back %+v, want %+v", got, p)
	}
	if got.Addr() != "agent.example:32222" {
		t.Errorf("Addr = %s", got.Addr())
	}
}

func TestProfileNotFoundListsKnown(t *testing.T) {
	s := newStore(t)
	_, err := s.Profile("prod")
	var nf *NotFoundError
	if !errors.As(err, &nf) || len(nf.Known) != 0 || !strings.Contains(err.Error(), "no profiles yet") {
		t.Errorf("empty store: %v", err)
	}
	addProfile(t, s, "b")
	addProfile(t, s, "a")
	_, err = s.Profile("prod")
	if !errors.As(err, &nf) || strings.Join(nf.Known, ",") != "a,b" {
		t.Errorf("got %v, want the known profiles a, b", err)
	}
}

func TestAddProfileHostKeyChange(t *testing.T) {
	s := newStore(t)
	p := addProfile(t, s, "prod")
	p.Port = 2222
	if err := s.AddProfile(p, false); err != nil {
		t.Fatalf("re-adding with the same host key: %v", err)
	}
	changed := p
	changed.HostKey = hostKey(t)
	err := s.AddProfile(changed, false)
	var hk *HostKeyChangedError
	if !errors.As(err, &hk) {
		t.Fatalf("re-adding with another host key: %v, want *HostKeyChangedError", err)
	}
	if got, _ := s.Profile("prod"); got.HostKey != p.HostKey || got.Port != 2222 {
		t.Error("a refused AddProfile changed the profile")
	}
	if err := s.AddProfile(changed, true); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Profile("prod"); got.HostKey != changed.HostKey {
		t.Error("AddProfile with force kept the old host key")
	}
}

func TestAddProfileRefusesBadInput(t *testing.T) {
	s := newStore(t)
	key := hostKey(t)
	for _, p := range []Profile{
		{Name: "bad/name", Host: "h", Port: 1, HostKey: key},
		{Name: "p", Host: "", Port: 1, HostKey: key},
		{Name: "p", Host: "h", Port: 0, HostKey: key},
		{Name: "p", Host: "h", Port: 65536, HostKey: key},
		{Name: "p", Host: "h", Port: 22, HostKey: "not a key"},
		{Name: "p", Host: "h", Port: 22, HostKey: ""},
		{Name: "p", Host: "h", Port: 22, User: "a b", HostKey: key},
	} {
		if err := s.AddProfile(p, false); err == nil {
			t.Errorf("AddProfile(%+v) accepted it", p)
		}
	}
	if names, _ := s.Names(); len(names) != 0 {
		t.Errorf("refused profiles left %v", names)
	}
	addProfile(t, s, "Prod")
	var exists *ExistsError
	if err := s.AddProfile(Profile{Name: "prod", Host: "h", Port: 22, HostKey: key}, false); !errors.As(err, &exists) {
		t.Errorf("a profile differing only by case: %v, want *ExistsError", err)
	}
}

func TestValidName(t *testing.T) {
	for _, ok := range []string{"prod", "gw.example.com", "198.51.100.7", "my_cluster-2", "A", strings.Repeat("a", 64)} {
		if err := ValidName(ok); err != nil {
			t.Errorf("ValidName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".plug", "-x", "a/b", "a:b", "a b", "..", strings.Repeat("a", 65), "é"} {
		err := ValidName(bad)
		var ne *NameError
		if !errors.As(err, &ne) || !strings.Contains(err.Error(), NameForm) {
			t.Errorf("ValidName(%q) = %v, want a *NameError with the accepted form", bad, err)
		}
	}
}

func TestRenameMovesKeyPair(t *testing.T) {
	s := newStore(t)
	p := addProfile(t, s, "gw.example.com")
	pub, err := s.GenerateKey(p.Name, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Rename("gw.example.com", "prod"); err != nil {
		t.Fatal(err)
	}
	got, err := s.Profile("prod")
	if err != nil || got.Host != p.Host {
		t.Fatalf("renamed profile: %+v %v", got, err)
	}
	signer, err := s.Signer("prod")
	if err != nil || Fingerprint(signer.PublicKey()) != Fingerprint(pub) {
		t.Fatalf("renamed key pair: %v", err)
	}
	for _, gone := range []string{s.ProfilePath(p.Name), s.KeyPath(p.Name), s.KeyPath(p.Name) + ".pub"} {
		if exists(gone) {
			t.Errorf("%s is still there after the rename", gone)
		}
	}
	wantMode(t, s.KeyPath("prod"), 0o600)
}

func TestRenameWithoutKeyPair(t *testing.T) {
	s := newStore(t)
	addProfile(t, s, "a")
	if err := s.Rename("a", "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Profile("b"); err != nil {
		t.Fatal(err)
	}
}

func TestRenameRefusals(t *testing.T) {
	s := newStore(t)
	addProfile(t, s, "a")
	addProfile(t, s, "b")
	if _, err := s.GenerateKey("a", "", false); err != nil {
		t.Fatal(err)
	}
	var exists *ExistsError
	if err := s.Rename("a", "b"); !errors.As(err, &exists) {
		t.Errorf("rename onto an existing profile: %v, want *ExistsError", err)
	}
	if err := s.Rename("a", "B"); !errors.As(err, &exists) {
		t.Errorf("rename onto a profile differing by case: %v, want *ExistsError", err)
	}
	// A stray key pair under the new name is not overwritten either.
	if _, err := s.GenerateKey("c", "", false); err != nil {
		t.Fatal(err)
	}
	if err := s.Rename("a", "c"); !errors.As(err, &exists) || exists.What != "key pair" {
		t.Errorf("rename onto an existing key pair: %v, want *ExistsError for the key pair", err)
	}
	var nf *NotFoundError
	if err := s.Rename("missing", "d"); !errors.As(err, &nf) {
		t.Errorf("rename of a missing profile: %v, want *NotFoundError", err)
	}
	var ne *NameError
	if err := s.Rename("a", "bad/name"); !errors.As(err, &ne) {
		t.Errorf("rename to a bad name: %v, want *NameError", err)
	}
	if _, err := s.Profile("a"); err != nil {
		t.Errorf("refused renames damaged profile a: %v", err)
	}
	if _, err := s.Signer("a"); err != nil {
		t.Errorf("refused renames damaged the key pair of a: %v", err)
	}
}

func TestRenameFailureKeepsOldName(t *testing.T) {
	s := newStore(t)
	addProfile(t, s, "a")
	if _, err := s.GenerateKey("a", "", false); err != nil {
		t.Fatal(err)
	}
	// The profile moves last; make that move fail.
	defer func() { renameFile = os.Rename }()
	renameFile = func(from, to string) error {
		if to == s.ProfilePath("b") {
			return &os.LinkError{Op: "rename", Old: from, New: to, Err: fs.ErrPermission}
		}
		return os.Rename(from, to)
	}
	if err := s.Rename("a", "b"); err == nil {
		t.Fatal("rename succeeded although moving the profile failed")
	}
	if _, err := s.Signer("a"); err != nil {
		t.Errorf("after a failed rename, the key pair of a: %v", err)
	}
	if _, _, err := s.PublicKey("a"); err != nil {
		t.Errorf("after a failed rename, the public key of a: %v", err)
	}
	if exists(s.KeyPath("b")) || exists(s.KeyPath("b")+".pub") {
		t.Error("a failed rename left a key pair under the new name")
	}
}

func TestHomeHonoursPLUG_HOME(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PLUG_HOME", dir)
	s, err := Home()
	if err != nil || s.Dir() != dir {
		t.Errorf("Home() = %v %v, want %s", s.Dir(), err, dir)
	}
}

func TestParseHostKey(t *testing.T) {
	key := hostKey(t)
	if _, err := ParseHostKey(key + " agent@cluster"); err != nil {
		t.Errorf("with a comment: %v", err)
	}
	for _, bad := range []string{"", "ssh-ed25519", "AAAA", key + "\n" + key} {
		if _, err := ParseHostKey(bad); err == nil {
			t.Errorf("ParseHostKey(%q) accepted it", bad)
		}
	}
}
