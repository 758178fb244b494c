package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/crypto/ssh"

	"plug/keys"
	"plug/tunnel"
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
	tmp, err := writeNewHostKey(dir)
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp)
	// A link never replaces an existing file: the first key written wins.
	if err := os.Link(tmp, path); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("cannot write the agent's host key: %w", err)
	}
	return readHostKey(path)
}

// rotateHostKeyFile replaces the host key kept in dir with a new one and
// returns the one it replaced (nil if none) and the new one; the agent
// presents it from its next start.
func rotateHostKeyFile(dir string) (before, after ssh.PublicKey, err error) {
	path := filepath.Join(dir, hostKeyFile)
	if old, err := readHostKey(path); err == nil {
		before = old.PublicKey()
	}
	tmp, err := writeNewHostKey(dir)
	if err != nil {
		return nil, nil, err
	}
	defer os.Remove(tmp)
	if err := os.Rename(tmp, path); err != nil {
		return nil, nil, fmt.Errorf("cannot replace the agent's host key: %w", err)
	}
	signer, err := readHostKey(path)
	if err != nil {
		return nil, nil, err
	}
	return before, signer.PublicKey(), nil
}

// writeNewHostKey writes a new host key (0600) to a file of its own in dir,
// creating dir (0700), and returns the file's path.
func writeNewHostKey(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("cannot create the agent's state directory: %w", err)
	}
	private, _, err := keys.NewPrivateKey("plug agent host key")
	if err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, hostKeyFile+".*")
	if err != nil {
		return "", fmt.Errorf("cannot write the agent's host key: %w", err)
	}
	_, err = tmp.Write(private)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("cannot write the agent's host key: %w", err)
	}
	return tmp.Name(), nil
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

// agentHostKeyUsage is the usage of plug agent host-key.
const agentHostKeyUsage = `Usage: plug agent host-key rotate

Run where the agent runs (kubectl -n NAMESPACE exec deploy/plug -- /plug
agent host-key rotate; on Swarm, docker exec in the agent's container), with
the agent's environment. It replaces the agent's SSH host key with a new
one (on Kubernetes in the Secret plug-state, else in PLUG_STATE_DIR) and
prints the new key, its fingerprint, and what to do next: restart the
agents, which present the new key from their start, and give developers
the new fingerprint, which each pins with the command it prints.
`

// agentHostKey is plug agent host-key.
func (c *cli) agentHostKey(ctx context.Context, args []string) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
		fmt.Fprint(c.stdout, agentHostKeyUsage)
		return nil
	}
	if len(args) != 1 || args[0] != "rotate" {
		return usageError("agent", "agent host-key takes one word, rotate; got %q", tunnel.PeerText(strings.Join(args, " ")))
	}
	logger := func(format string, args ...any) { fmt.Fprintf(c.stderr, "plug agent: "+format+"\n", args...) }
	platform, err := newPlatform(ctx, os.Getenv("PLUG_PLATFORM"), logger)
	if err != nil {
		return err
	}
	var before, after ssh.PublicKey
	restart := "restart the agent (Swarm: docker service update --force STACK_agent)"
	if shared, ok := platform.(tunnel.SharedHostKey); ok {
		before, after, err = shared.RotateHostKey(ctx)
		restart = shared.RestartHint()
	} else {
		before, after, err = rotateHostKeyFile(stateDir())
	}
	if err != nil {
		return err
	}
	was := "none"
	if before != nil {
		was = keys.Fingerprint(before)
	}
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(after)))
	host, port := "HOST", "PORT"
	if h, p, err := net.SplitHostPort(os.Getenv("PLUG_PUBLIC_ADDR")); err == nil {
		host, port = h, p
	}
	fmt.Fprintf(c.stdout, `%s
The agent's host key is now %s (it was %s). The running agents present the old one until they start again.
1. Restart the agents: %s
2. Tell developers the new fingerprint, %s, by a channel other than plug. Each then runs
     plug profile add PROFILE --host %s --port %s --host-key '%s' --force
   or installs again: ssh -p %s get@%s install | sh -s -- --fingerprint %s
`, line, keys.Fingerprint(after), was, restart, keys.Fingerprint(after), host, port, line, port, host, keys.Fingerprint(after))
	return nil
}
