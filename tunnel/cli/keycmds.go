package cli

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"

	"plug/keys"
)

// keygenUsage is the usage of plug keygen.
const keygenUsage = `Usage: plug keygen [-p PROFILE] [--force]

Generates the ed25519 key pair plug uses for PROFILE, in ~/.plug/keys/PROFILE
and PROFILE.pub (an OpenSSH key: ssh -i ~/.plug/keys/PROFILE works too), and
prints its SHA256 fingerprint. -p may be left out when there is one profile.

  --force  replace the existing key pair; the old key stops working wherever
           it was deposited

Examples:
  plug keygen -p prod
  plug keygen -p prod --force      # a new key: deposit it again
`

// runKeygen is plug keygen.
func runKeygen(c *cli, args []string) error {
	fs := flags("keygen")
	force := fs.Bool("force", false, "")
	store, name, err := c.profileArgs("keygen", fs, args)
	if err != nil {
		return err
	}
	pub, err := store.GenerateKey(name, keyComment(), *force)
	var exists *keys.ExistsError
	if errors.As(err, &exists) {
		old, _, _ := store.PublicKey(name)
		what := ""
		if old != nil {
			what = " " + keys.Fingerprint(old)
		}
		return fmt.Errorf("profile %s already has a key pair%s (%s); it was kept. To replace it, and stop the old key working wherever it was deposited: plug keygen -p %s --force", name, what, exists.Path, name)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "Key pair of profile %s: %s\n  %s %s\n", name, store.KeyPath(name), keys.Fingerprint(pub), keyComment())
	fmt.Fprintf(c.stdout, "Next: deposit the public key where the cluster admits developers, or have it accepted:\n  plug pubkey -p %s\nthen plug a service in:\n  plug -p %s -s NAME:CLUSTERPORT:LOCALPORT -- CMD\n", name, name)
	return nil
}

// pubkeyUsage is the usage of plug pubkey.
const pubkeyUsage = `Usage: plug pubkey [-p PROFILE]

Prints PROFILE's public key as one authorized_keys line on stdout, and its
SHA256 fingerprint on stderr, to compare with what the cluster shows.
-p may be left out when there is one profile.

Examples:
  plug pubkey -p prod | pbcopy                        # macOS
  plug pubkey -p prod | xclip -selection clipboard    # Linux
  plug pubkey -p prod | clip                          # Windows, Git Bash
`

// runPubkey is plug pubkey.
func runPubkey(c *cli, args []string) error {
	store, name, err := c.profileOnly("pubkey", args)
	if err != nil {
		return err
	}
	pub, comment, err := store.PublicKey(name)
	var nokey *keys.NoKeyError
	if errors.As(err, &nokey) {
		return fmt.Errorf("%v; generate it with plug keygen -p %s", err, name)
	}
	if err != nil {
		return err
	}
	line := keys.AuthorizedKey(pub)
	if comment != "" {
		line += " " + comment
	}
	fmt.Fprintln(c.stdout, line)
	fmt.Fprintf(c.stderr, "%s (profile %s)\n", keys.Fingerprint(pub), name)
	return nil
}

// lsUsage is the usage of plug ls.
const lsUsage = `Usage: plug ls

Lists the profiles in ~/.plug: name, the agent's host:port, and the SHA256
fingerprint of the profile's key ("no key yet" before plug keygen).

Example:
  plug ls
`

// runLs is plug ls.
func runLs(c *cli, args []string) error {
	fs := flags("ls")
	if err := c.parseFlags("ls", fs, args); err != nil {
		return err
	}
	store, err := keys.Home()
	if err != nil {
		return err
	}
	names, err := store.Names()
	if err != nil {
		return err
	}
	if len(names) == 0 {
		fmt.Fprintln(c.stderr, "plug: "+noProfilesYet)
		return nil
	}
	w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PROFILE\tAGENT\tKEY")
	for _, name := range names {
		addr := "(unreadable profile)"
		if p, err := store.Profile(name); err == nil {
			addr = p.Addr()
		}
		key := "no key yet"
		if pub, _, err := store.PublicKey(name); err == nil {
			key = keys.Fingerprint(pub)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", name, addr, key)
	}
	return w.Flush()
}

// rnUsage is the usage of plug rn.
var rnUsage = `Usage: plug rn OLD NEW

` + hanging("", 0, "Renames profile OLD to NEW; its key pair moves with it. Refused when NEW already exists. A profile name is "+keys.NameForm+".") + `
Example:
  plug rn 203.0.113.7 prod         # the installer names a profile by host
`

// runRn is plug rn.
func runRn(c *cli, args []string) error {
	fs := flags("rn")
	pos, err := c.parse("rn", fs, args, true)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usageError("rn", "rn takes two profile names, OLD and NEW, e.g. plug rn gw.example.com prod")
	}
	store, err := keys.Home()
	if err != nil {
		return err
	}
	err = store.Rename(pos[0], pos[1])
	var ne *keys.NameError
	var nf *keys.NotFoundError
	if errors.As(err, &ne) || errors.As(err, &nf) {
		return usageError("rn", "%v", err)
	}
	var exists *keys.ExistsError
	if errors.As(err, &exists) {
		return fmt.Errorf("%v; nothing was renamed. Choose another name, or rename that one first", err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stderr, "plug: profile %s is now %s\n", pos[0], pos[1])
	return nil
}

// profileArgs parses the arguments of a command that takes -p PROFILE
// (profileAndArgs) and no positional argument, and resolves the profile,
// which must exist.
func (c *cli) profileArgs(cmd string, fs *flag.FlagSet, args []string) (keys.Store, string, error) {
	store, name, pos, err := c.profileAndArgs(cmd, fs, args)
	if err == nil && len(pos) > 0 {
		return keys.Store{}, "", usageError(cmd, "%s takes no arguments besides -p PROFILE, got %q", cmd, pos[0])
	}
	return store, name, err
}

// profileOnly is profileArgs for a command whose one flag is -p PROFILE.
func (c *cli) profileOnly(cmd string, args []string) (keys.Store, string, error) {
	return c.profileArgs(cmd, flags(cmd), args)
}

// profileAndArgs parses the arguments of a command that takes -p PROFILE,
// which it adds to fs, the command's other flags, and positional
// arguments, which it returns; it resolves the profile, which must exist.
func (c *cli) profileAndArgs(cmd string, fs *flag.FlagSet, args []string) (keys.Store, string, []string, error) {
	profile := fs.String("p", "", "")
	pos, err := c.parse(cmd, fs, args, true)
	if err != nil {
		return keys.Store{}, "", nil, err
	}
	store, err := keys.Home()
	if err != nil {
		return keys.Store{}, "", nil, err
	}
	var given []string
	if *profile != "" {
		given = []string{*profile}
	}
	names, err := runProfiles(store, given)
	if err != nil {
		return keys.Store{}, "", nil, usageError(cmd, "%v", err)
	}
	if _, err := store.Profile(names[0]); err != nil {
		return keys.Store{}, "", nil, usageError(cmd, "%v", err)
	}
	return store, names[0], pos, nil
}

// keyComment labels a new key with the workstation it belongs to.
func keyComment() string {
	host, _ := os.Hostname()
	return userFor(keys.Profile{}) + "@" + host
}
