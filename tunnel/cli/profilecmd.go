package cli

import (
	"errors"
	"fmt"

	"plug/keys"
)

// profileUsage is the usage of plug profile.
var profileUsage = `Usage: plug profile add NAME --host HOST --port PORT [--user USER]
         --host-key 'ssh-ed25519 AAAA...' [--platform P] [--force]

Adds profile NAME: how to reach a cluster's agent, and the agent's host key,
which plug pins and checks on every connection. The installer runs this for
you; ssh-keyscan -p PORT HOST prints the host key of an agent.

  --host HOST      the agent's host name or address (a node, a load balancer,
                   127.0.0.1 through kubectl port-forward)
  --port PORT      its port (32222 for the NodePort of the Kubernetes
                   manifest)
  --user USER      the SSH user (default: your local user name)
  --host-key KEY   the agent's host key, authorized_keys form
  --platform P     a hint: kubernetes, swarm or gateway
  --force          replace the host key of an existing profile (after the
                   agent's key was changed on purpose)

` + hanging("", 0, "A profile name is "+keys.NameForm+".") + `
Example:
  plug profile add prod --host 127.0.0.1 --port 2222 \
    --host-key "$(ssh-keyscan -p 2222 -t ed25519 127.0.0.1 | cut -d' ' -f2-)"
`

// runProfile is plug profile.
func runProfile(c *cli, args []string) error {
	if len(args) == 0 || args[0] != "add" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			fmt.Fprint(c.stdout, c.lookup("profile").usage)
			return nil
		}
		return usageError("profile", "profile takes a subcommand: plug profile add NAME --host HOST --port PORT --host-key 'ssh-ed25519 AAAA...'")
	}
	return c.profileAdd(args[1:])
}

func (c *cli) profileAdd(args []string) error {
	fs := flags("profile add")
	var p keys.Profile
	fs.StringVar(&p.Host, "host", "", "")
	fs.IntVar(&p.Port, "port", 0, "")
	fs.StringVar(&p.User, "user", "", "")
	fs.StringVar(&p.HostKey, "host-key", "", "")
	fs.StringVar(&p.Platform, "platform", "", "")
	force := fs.Bool("force", false, "")
	pos, err := c.parse("profile", fs, args, true)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError("profile", "profile add takes one profile name, e.g. plug profile add prod --host 198.51.100.7 --port 32222 --host-key 'ssh-ed25519 AAAA...'")
	}
	p.Name = pos[0]
	store, err := keys.Home()
	if err != nil {
		return err
	}
	old, oldErr := store.Profile(p.Name)
	err = store.AddProfile(p, *force)
	var changed *keys.HostKeyChangedError
	if errors.As(err, &changed) {
		return fmt.Errorf("%v. An agent's host key changes when it is reinstalled without its state; if you expected that, pin the new key with --force. Otherwise something else answers at %s: do not connect", err, p.Addr())
	}
	var exists *keys.ExistsError
	if errors.As(err, &exists) {
		return fmt.Errorf("%v; profile names differing only in case would be one file on macOS and Windows. Use %s, or another name", err, exists.Name)
	}
	var ne *keys.NameError
	var pe *keys.ProfileError
	if errors.As(err, &ne) || errors.As(err, &pe) {
		return usageError("profile", "%v", err)
	}
	if err != nil {
		return err
	}
	key, _ := keys.ParseHostKey(p.HostKey)
	switch {
	case oldErr != nil:
		fmt.Fprintf(c.stderr, "plug: profile %s added: %s, host key %s\n", p.Name, p.Addr(), keys.Fingerprint(key))
	case old.HostKey != keys.AuthorizedKey(key):
		oldKey, _ := old.PinnedKey()
		fmt.Fprintf(c.stderr, "plug: profile %s now pins host key %s (was %s): %s\n", p.Name, keys.Fingerprint(key), keys.Fingerprint(oldKey), p.Addr())
	default:
		fmt.Fprintf(c.stderr, "plug: profile %s updated: %s, host key %s\n", p.Name, p.Addr(), keys.Fingerprint(key))
	}
	return nil
}
