package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/crypto/ssh"

	"plug/keys"
)

// hostKeyFile is the agent's host key in its state directory, in the
// OpenSSH private key format.
const hostKeyFile = "ssh_host_ed25519_key"

// loadOrCreateHostKey returns the agent's ed25519 host key kept in dir,
// creating dir (0700) and the key (0600) the first time. Agents sharing dir
// share the key: when two create it at once, both end up with the one that
// was written first.
func loadOrCreateHostKey(dir string) (ssh.Signer, error) {
	path := filepath.Join(dir, hostKeyFile)
	if signer, err := readHostKey(path); !errors.Is(err, fs.ErrNotExist) {
		return signer, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cannot create the agent's state directory: %w", err)
	}
	private, _, err := keys.NewPrivateKey("plug agent host key")
	if err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(dir, hostKeyFile+".*")
	if err != nil {
		return nil, fmt.Errorf("cannot write the agent's host key: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(private); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("cannot write the agent's host key: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("cannot write the agent's host key: %w", err)
	}
	// A link never replaces an existing file: the first key written wins.
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("cannot write the agent's host key: %w", err)
	}
	return readHostKey(path)
}

func readHostKey(path string) (ssh.Signer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	signer, err := ssh.ParsePrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("the agent's host key %s is unreadable (%v); remove it to have a new one made", path, err)
	}
	return signer, nil
}

// listenAddr is the address the agent listens on: PLUG_ADDR, else
// MEERKAT_PLUG_ADDR (the gateway edition's name), else ":2222".
func listenAddr() string {
	for _, name := range []string{"PLUG_ADDR", "MEERKAT_PLUG_ADDR"} {
		if addr := os.Getenv(name); addr != "" {
			return addr
		}
	}
	return ":2222"
}
