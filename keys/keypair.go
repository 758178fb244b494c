package keys

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/crypto/ssh"
)

// NewPrivateKey makes a fresh ed25519 key and returns it in the OpenSSH
// private key format (PEM) with comment, and its public key.
func NewPrivateKey(comment string) (private []byte, public ssh.PublicKey, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	block, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return nil, nil, err
	}
	public, err = ssh.NewPublicKey(pub)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(block), public, nil
}

// GenerateKey creates the ed25519 key pair of profile name, with comment
// carried in both files (it tells deposited keys apart, e.g. "me@laptop").
// An existing key pair is refused with an *ExistsError unless force is set.
// The profile itself need not exist.
func (s Store) GenerateKey(name, comment string, force bool) (ssh.PublicKey, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	path := s.KeyPath(name)
	if !force && (exists(path) || exists(path+".pub")) {
		return nil, &ExistsError{What: "key pair", Name: name, Path: path}
	}
	private, sshPub, err := NewPrivateKey(comment)
	if err != nil {
		return nil, err
	}
	line := AuthorizedKey(sshPub)
	if comment != "" {
		line += " " + comment
	}
	if err := s.ensureDirs(s.keysDir()); err != nil {
		return nil, err
	}
	// The private key goes first: a public key without its private key
	// would look usable to `plug pubkey`.
	if err := writeFile(path, private, 0o600); err != nil {
		return nil, err
	}
	if err := writeFile(path+".pub", []byte(line+"\n"), 0o644); err != nil {
		return nil, err
	}
	return sshPub, nil
}

// Signer loads the private key of profile name. A missing key gives a
// *NoKeyError.
func (s Store) Signer(name string) (ssh.Signer, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	path := s.KeyPath(name)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &NoKeyError{Name: name, Path: path}
	}
	if err != nil {
		return nil, err
	}
	signer, err := ssh.ParsePrivateKey(data)
	var missing *ssh.PassphraseMissingError
	if errors.As(err, &missing) {
		return nil, fmt.Errorf("the key %s is protected by a passphrase, which plug cannot ask for; generate a plug key pair with plug keygen", path)
	}
	if err != nil {
		return nil, fmt.Errorf("the key %s cannot be read: %v", path, err)
	}
	return signer, nil
}

// PublicKey reads the public key of profile name and its comment. A
// missing key gives a *NoKeyError.
func (s Store) PublicKey(name string) (ssh.PublicKey, string, error) {
	if err := ValidName(name); err != nil {
		return nil, "", err
	}
	path := s.KeyPath(name) + ".pub"
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", &NoKeyError{Name: name, Path: path}
	}
	if err != nil {
		return nil, "", err
	}
	key, comment, _, _, err := ssh.ParseAuthorizedKey(data)
	if err != nil {
		return nil, "", fmt.Errorf("the public key %s cannot be read: %v", path, err)
	}
	return key, comment, nil
}
