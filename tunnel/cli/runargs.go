package cli

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/crypto/ssh"

	"plug/keys"
)

var runCommand = &command{
	name:     "run",
	synopsis: "run CMD as a member of each PROFILE's cluster",
	usage: `Usage: plug [-p PROFILE]... [-s NAME:CLUSTERPORT:LOCALPORT]... [-c] [--] CMD [ARGS...]

Runs CMD on this machine as a member of each PROFILE's cluster, for as long as
CMD runs.

  -p PROFILE  the cluster to join (plug ls lists the profiles). Repeat it to join
              several clusters at once. It may be left out when there is only one.
  -s NAME:CLUSTERPORT:LOCALPORT
              the cluster reaches NAME:CLUSTERPORT, forwarded to localhost:LOCALPORT.
              NAME is a DNS-1035 label: at most 63 lowercase letters, digits and
              '-', starting with a letter. A Service of that name already deployed
              is taken over for the run and put back afterwards. Repeat -s for
              several names. With several -p, each -s is served in every profile's
              cluster; PROFILE/NAME:CLUSTERPORT:LOCALPORT serves it in one only.
  -c          CMD consumes the cluster's services; without -s it serves no name
  --          ends plug's options; what follows is CMD

plug's options end at CMD: in "plug -s web:80:3000 app -p 1", -p 1 goes to app.
Everything is checked before any agent is contacted.

CMD keeps the terminal. Ctrl-C, SIGTERM and SIGHUP go to CMD; when CMD exits,
plug says goodbye and the agents give the names back at once. A second Ctrl-C
stops plug at once: CMD is killed, and the agents give the names back after
their grace period. If a connection drops, plug reconnects and the run keeps its
names while CMD keeps running. If an agent ends the run, plug says why, stops
CMD as Ctrl-C would and exits with 4.

Examples:
  plug -p prod -s web:8080:3000 -- npm start
  plug -p prod -p staging -s web:80:3000 -s prod/api:8080:4000 ./server
  plug -p prod -c -- curl http://web:8080/

Exit codes: CMD's own code (128+N if CMD was killed by signal N); 2 bad usage,
nothing contacted; 3 could not connect or serve, CMD not started; 4 the run was
ended by an agent or lost its connection for good, CMD stopped; 126/127 CMD not
executable / not found.
`,
	run: func(c *cli, args []string) error {
		p, err := c.planRun(args)
		if err != nil {
			return err
		}
		return c.execute(p)
	},
}

// plan is a run whose every argument has been checked.
type plan struct {
	targets []*target
	client  bool     // -c: CMD consumes the cluster
	cmd     []string // CMD and its arguments
}

// target is one profile of a run: where its agent is and what to serve there.
type target struct {
	profile keys.Profile
	user    string
	signer  ssh.Signer
	hostKey ssh.PublicKey
	serves  []Serve
}

// planRun checks the run's arguments, profiles and keys, contacting
// nothing. Every refusal is a usage error (exit 2).
func (c *cli) planRun(args []string) (*plan, error) {
	var profiles, serveArgs multiFlag
	var client bool
	fs := flags("run")
	fs.Var(&profiles, "p", "")
	fs.Var(&serveArgs, "s", "")
	fs.BoolVar(&client, "c", false, "")
	cmd, err := c.parse("run", fs, args, false)
	if err != nil {
		return nil, err
	}
	bad := func(format string, a ...any) (*plan, error) { return nil, usageError("run", format, a...) }

	switch {
	case len(cmd) == 0 && len(serveArgs) > 0:
		return bad("-s needs a command to run, after the options: plug -s %s -- npm start", serveArgs[0])
	case len(cmd) == 0 && client:
		return bad("-c needs a command to run, after the options: plug -c -- curl http://web:8080/")
	case len(cmd) == 0:
		return bad("no command to run; e.g. plug -p PROFILE -s web:8080:3000 -- npm start")
	case len(serveArgs) == 0 && !client:
		return bad("what should %s do in the cluster? Give -s NAME:CLUSTERPORT:LOCALPORT to serve it under a name, or -c to only consume: plug -c -- %s", cmd[0], strings.Join(cmd, " "))
	}

	var serves []Serve
	for _, v := range serveArgs {
		s, err := ParseServe(v)
		if err != nil {
			return bad("%v", err)
		}
		serves = append(serves, s)
	}
	store, err := keys.Home()
	if err != nil {
		return bad("%v", err)
	}
	names, err := runProfiles(store, profiles)
	if err != nil {
		return bad("%v", err)
	}
	p := &plan{client: client, cmd: cmd}
	byName := make(map[string]*target)
	for _, name := range names {
		t, err := loadTarget(store, name)
		if err != nil {
			return bad("%v", err)
		}
		p.targets = append(p.targets, t)
		byName[name] = t
	}
	for _, s := range serves {
		into := p.targets
		if s.Profile != "" {
			t := byName[s.Profile]
			if t == nil {
				return bad("-s %s names profile %q, which is not one of this run's profiles (%s); add -p %s", s, s.Profile, strings.Join(names, ", "), s.Profile)
			}
			into = []*target{t}
		}
		for _, t := range into {
			for _, prev := range t.serves {
				if prev.Name == s.Name {
					return bad("two -s for %s in profile %s (-s %s and -s %s); a name is served once per cluster, e.g. -s %s", s.Name, t.profile.Name, prev, s, prev)
				}
			}
			t.serves = append(t.serves, s)
		}
	}
	return p, nil
}

// runProfiles returns the run's profile names: those given with -p, or the
// only profile there is.
func runProfiles(store keys.Store, given []string) ([]string, error) {
	if len(given) > 0 {
		var names []string
		for _, n := range given {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
		return names, nil
	}
	all, err := store.Names()
	if err != nil {
		return nil, err
	}
	switch len(all) {
	case 0:
		return nil, errors.New(noProfilesYet)
	case 1:
		return all, nil
	}
	return nil, fmt.Errorf("there are %d profiles (%s); choose one with -p, e.g. -p %s", len(all), strings.Join(all, ", "), all[0])
}

// noProfilesYet tells where profiles come from.
const noProfilesYet = `there are no profiles yet; the installer creates one:
  ssh -p PORT get@HOST install | sh
or add one by hand:
  plug profile add NAME --host HOST --port PORT --host-key 'ssh-ed25519 AAAA...'`

// loadTarget reads profile name and its key pair.
func loadTarget(store keys.Store, name string) (*target, error) {
	prof, err := store.Profile(name)
	var nf *keys.NotFoundError
	if errors.As(err, &nf) && len(nf.Known) == 0 {
		return nil, errors.New(noProfilesYet)
	}
	if errors.As(err, &nf) {
		return nil, fmt.Errorf("%v (plug ls lists them)", err)
	}
	if err != nil {
		return nil, err
	}
	signer, err := store.Signer(name)
	var nokey *keys.NoKeyError
	if errors.As(err, &nokey) {
		return nil, fmt.Errorf("%v; generate it with plug keygen -p %s, then deposit the key plug pubkey -p %s prints", err, name, name)
	}
	if err != nil {
		return nil, err
	}
	hostKey, err := prof.PinnedKey()
	if err != nil {
		return nil, err
	}
	return &target{profile: prof, user: userFor(prof), signer: signer, hostKey: hostKey}, nil
}

// userFor is the SSH user of a profile: its own, or the local user name.
func userFor(p keys.Profile) string {
	for _, u := range []string{p.User, os.Getenv("USER"), os.Getenv("USERNAME")} {
		if u != "" {
			return u
		}
	}
	return "plug"
}
