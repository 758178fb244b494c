// Package keys keeps what the plug CLI knows on a developer's machine: one
// profile per cluster and one key pair per profile, under ~/.plug
// ($PLUG_HOME overrides it):
//
//	~/.plug/profiles/NAME     the profile (JSON: host, port, user, pinned host key)
//	~/.plug/keys/NAME         the profile's ed25519 private key, OpenSSH format
//	~/.plug/keys/NAME.pub     its public key, authorized_keys form
//
// Directories are created 0700, private files 0600, public keys 0644. The
// private key is the standard OpenSSH one, so `ssh -i ~/.plug/keys/NAME`
// works with plain OpenSSH too.
package keys

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/crypto/ssh"
)

// Store is a ~/.plug directory. The zero value is not usable; use Open or
// Home.
type Store struct {
	dir string
}

// Open returns the Store rooted at dir. Nothing is created until something
// is written.
func Open(dir string) Store { return Store{dir: dir} }

// Home returns the Store at $PLUG_HOME, or ~/.plug when it is unset.
func Home() (Store, error) {
	if d := os.Getenv("PLUG_HOME"); d != "" {
		return Open(d), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return Store{}, errors.New("cannot find your home directory for ~/.plug: " + err.Error() + "; set PLUG_HOME to the directory plug should use")
	}
	return Open(filepath.Join(home, ".plug")), nil
}

// Dir is the root of the store.
func (s Store) Dir() string { return s.dir }

func (s Store) profilesDir() string { return filepath.Join(s.dir, "profiles") }
func (s Store) keysDir() string     { return filepath.Join(s.dir, "keys") }

// ProfilePath is where the profile NAME is stored.
func (s Store) ProfilePath(name string) string { return filepath.Join(s.profilesDir(), name) }

// KeyPath is where the private key of profile NAME is stored; its public
// key is KeyPath(name)+".pub".
func (s Store) KeyPath(name string) string { return filepath.Join(s.keysDir(), name) }

// Fingerprint returns the SHA256 fingerprint of key in the form
// `ssh-keygen -l` prints: "SHA256:" and unpadded base64.
func Fingerprint(key ssh.PublicKey) string { return ssh.FingerprintSHA256(key) }

// AuthorizedKey returns key as one authorized_keys line without comment or
// newline: "ssh-ed25519 AAAA...".
func AuthorizedKey(key ssh.PublicKey) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))
}
