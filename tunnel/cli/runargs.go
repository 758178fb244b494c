package cli

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/crypto/ssh"

	"plug/keys"
	"plug/tunnel"
)

// runUsage is the usage of a run (plug help run).
const runUsage = `Usage: plug [-p PROFILE]... [-s NAME:CLUSTERPORT:LOCALPORT]... [-c]
            [ENVIRONMENT] [--] CMD [ARGS...]
       plug [-p PROFILE] --env-from WORKLOAD (--env-file FILE | --env-json
            FILE) [--]

Runs CMD on this machine as a member of each PROFILE's cluster, for as long as
CMD runs.

  -p PROFILE  the cluster to join (plug ls lists the profiles). Repeat it to
              join several clusters at once. It may be left out when there is
              only one.
  -s NAME:CLUSTERPORT:LOCALPORT
              the cluster reaches NAME:CLUSTERPORT, forwarded to
              localhost:LOCALPORT. NAME is a DNS-1035 label: at most 63
              lowercase letters, digits and '-', starting with a letter. A
              Service of that name already deployed is taken over for the run
              and put back afterwards. Repeat -s for several names. With
              several -p, each -s is served in every profile's cluster;
              PROFILE/NAME:CLUSTERPORT:LOCALPORT serves it in one only.
              NAME:CLUSTERPORT:LOCALPORT/udp serves NAME's UDP port instead,
              sent to the UDP port LOCALPORT of localhost: each sender in the
              cluster is one flow, whose replies go back to it; a flow ends
              after 60 s without a datagram either way. (/tcp, the default,
              may be said.) A name is served on one port per run.
  --header NAME=VALUE, --header NAME~REGEX
              with -s, a personal takeover: of the requests to each NAME of -s
              (a deployed Service), only those whose header NAME is VALUE
              exactly, or whose whole value matches REGEX (Go regexp syntax),
              reach LOCALPORT; every other request, and every connection
              that is not cleartext HTTP (TLS among them), still reaches the
              deployed pods. The agent routes HTTP/1.1 request by request and
              HTTP/2 (h2c, gRPC) stream by stream. Repeat it for several
              headers (all must match; at most 8). Several developers may
              take one name over personally at once, with filters that do
              not overlap. The split is at the first '=' or '~'.
  --path PREFIX
              with -s, a personal takeover of the requests whose path starts
              with PREFIX (e.g. /api/ or /shop.Cart/); with --header, both
              must match
  -c          CMD consumes the cluster's services (TCP and UDP ports); without
              -s it serves no name
  --dockerrun CMD is IMAGE [ARGS...], run in a local Docker container by the
              local docker CLI (Linux: the engine on this machine), as
                docker run --rm -i [-t] --name plug-RUN --label plug.run=RUN
                  --network host --add-host NAME:ADDR... -- IMAGE [ARGS...]
              The container shares this machine's network: it reaches the
              cluster's names (each --add-host, as known when it starts) and
              listens on LOCALPORT itself. Ctrl-C stops it (docker stop) and
              it is removed; its exit code is plug's. plug who shows the run
              as a dockerrun. Not with --env or --env-from.
  -v, --volume [PROFILE/]KIND/NAME:VOLUME[:LOCALDIR]
              the workload's volume VOLUME (its name in the pod spec; on Swarm
              the mount's target) is a directory on this machine while CMD
              runs: the agent starts a helper that serves it over SMB as the
              workload's uid, reached through the run's connection on a port
              of 127.0.0.1. plug mounts it on LOCALDIR (default ./VOLUME)
              where it can without privilege (macOS; Linux as root), else it
              prints the one command that does. ConfigMaps and Secrets are
              read-only; an emptyDir is refused. Unmounted, and the helper
              removed, when the run ends. At most 4.
  --          ends plug's options; what follows is CMD

ENVIRONMENT: CMD gets a workload's environment, as its container has it.
  --env-from [PROFILE/]KIND/NAME[:CONTAINER]
              the workload: deploy/NAME, statefulset/NAME, daemonset/NAME,
              job/NAME or pod/NAME on Kubernetes (in the agent's namespace),
              service/NAME on Swarm; its running pod, or its pod template when
              none runs; CONTAINER, or the default (annotation
              kubectl.kubernetes.io/default-container) or first container.
              With several -p, PROFILE says whose. CMD then gets exactly that
              environment, except the variables this machine keeps (below).
              Variables the agent may not read (Secrets, without that right)
              are left out, and named. Without -s or -c, CMD runs with the
              environment alone.
  --env-file FILE
              also write it to FILE as dotenv (NAME=VALUE lines), mode 0600
  --env-json FILE
              also write it to FILE as one JSON object, mode 0600
              With -- and no CMD, plug only writes the files.
  --env NAME=VALUE
              set NAME for CMD (and in the files), over the workload's value;
              without --env-from, over this machine's
  --env-keep LIST
              comma-separated names, or prefixes ending in '*', that this
              machine keeps over the workload, besides the default: PATH HOME
              USER LOGNAME SHELL HOSTNAME PWD OLDPWD TMPDIR TMP TEMP TERM
              TERMINFO COLORTERM LANG LANGUAGE LC_* DISPLAY WAYLAND_DISPLAY
              XAUTHORITY XDG_* DBUS_SESSION_BUS_ADDRESS SSH_AUTH_SOCK
              SSH_AGENT_PID PLUG_HOME, macOS's TERM_PROGRAM TERM_PROGRAM_VERSION
              TERM_SESSION_ID __CF_USER_TEXT_ENCODING, and Windows' own
              (USERPROFILE, SYSTEMROOT, COMSPEC, PATHEXT, APPDATA, ...). -NAME
              imports the workload's NAME instead, e.g. --env-keep -LANG;
              --env-keep '-*' keeps nothing of this machine's.

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
  plug -p prod -s web:8080:3000 --header 'X-Dev=alice' -- npm start
  plug -p prod -p staging -s web:80:3000 -s prod/api:8080:4000 ./server
  plug -p prod -c -- curl http://web:8080/
  plug -p prod -s api:8080:3000 --dockerrun -- my-api:dev --port 3000
  plug -p prod -s web:8080:3000 --env-from deploy/web -- npm start
  plug -p prod --env-from deploy/web:app --env-file .env --
  plug -p prod -v deploy/web:data:./data -- bash

Exit codes: CMD's own code (128+N if CMD was killed by signal N); 0 the files
were written (no CMD); 2 bad usage, nothing contacted; 3 could not connect,
serve or read the environment, CMD not started; 4 the run was
ended by an agent or lost its connection for good, CMD stopped; 126/127 CMD not
executable / not found.
`

// runRun is a run: plug -p PROFILE ... CMD.
func runRun(c *cli, args []string) error {
	p, err := c.planRun(args)
	if err != nil {
		return err
	}
	return c.execute(p)
}

// plan is a run whose every argument has been checked.
type plan struct {
	targets []*target
	client  bool     // -c: CMD consumes the cluster
	cmd     []string // CMD and its arguments; none when the run only writes files
	env     *envPlan // --env-from, if given
	volumes []*volumePlan
	set     []string      // --env without --env-from
	docker  bool          // --dockerrun: CMD is IMAGE [ARGS...], run in a local container
	filter  tunnel.Filter // --header, --path: every -s is a personal takeover
	id      string        // the run's id, once connectAndServe made it
}

// tunnels reports whether the run connects to its agents: it serves or
// consumes, rather than only taking an environment.
func (p *plan) tunnels() bool {
	if p.client || len(p.volumes) > 0 {
		return true
	}
	for _, t := range p.targets {
		if len(t.serves) > 0 {
			return true
		}
	}
	return false
}

// target is one profile of a run: where its agent is and what to serve there.
type target struct {
	profile keys.Profile
	user    string
	signer  ssh.Signer
	hostKey ssh.PublicKey
	comment string // of the public key: plug who shows it beside the fingerprint
	serves  []Serve
}

// planRun checks the run's arguments, profiles and keys, contacting
// nothing. Every refusal is a usage error (exit 2).
func (c *cli) planRun(args []string) (*plan, error) {
	var profiles, serveArgs, envFrom, envSet, envKeep, volumeArgs, headers multiFlag
	var client, docker bool
	var envFile, envJSON, path string
	fs := flags("run")
	fs.Var(&profiles, "p", "")
	fs.Var(&serveArgs, "s", "")
	fs.BoolVar(&client, "c", false, "")
	fs.BoolVar(&docker, "dockerrun", false, "")
	fs.Var(&volumeArgs, "v", "")
	fs.Var(&volumeArgs, "volume", "")
	fs.Var(&envFrom, "env-from", "")
	fs.StringVar(&envFile, "env-file", "", "")
	fs.StringVar(&envJSON, "env-json", "", "")
	fs.Var(&envSet, "env", "")
	fs.Var(&envKeep, "env-keep", "")
	fs.Var(&headers, "header", "")
	fs.StringVar(&path, "path", "", "")
	cmd, err := c.parse("run", fs, args, false)
	if err != nil {
		return nil, err
	}
	bad := func(format string, a ...any) (*plan, error) { return nil, usageError("run", format, a...) }

	switch {
	case len(envFrom) > 1:
		return bad("one --env-from a run (given: %s); use --env NAME=VALUE for more variables", strings.Join(envFrom, ", "))
	case len(envFrom) == 0 && (envFile != "" || envJSON != "" || len(envKeep) > 0):
		return bad("--env-file, --env-json and --env-keep go with --env-from, which names the workload, e.g. --env-from deploy/web --env-file .env")
	case len(cmd) == 0 && len(envFrom) > 0 && len(serveArgs) == 0 && !client:
		if envFile == "" && envJSON == "" {
			return bad("--env-from %s with no command: give CMD to run with it, or --env-file FILE or --env-json FILE to write it", envFrom[0])
		}
	case len(cmd) == 0 && len(serveArgs) > 0:
		return bad("-s needs a command to run, after the options: plug -s %s -- npm start", serveArgs[0])
	case len(cmd) == 0 && len(volumeArgs) > 0:
		return bad("--volume needs a command to run, for as long as the volume is mounted: plug -v %s -- bash", volumeArgs[0])
	case len(cmd) == 0 && client:
		return bad("-c needs a command to run, after the options: plug -c -- curl http://web:8080/")
	case len(cmd) == 0:
		return bad("no command to run; e.g. plug -p PROFILE -s web:8080:3000 -- npm start")
	case len(serveArgs) == 0 && !client && len(envFrom) == 0 && len(volumeArgs) == 0:
		return bad("what should %s do in the cluster? Give -s NAME:CLUSTERPORT:LOCALPORT to serve it under a name, or -c to only consume: plug -c -- %s", cmd[0], strings.Join(cmd, " "))
	}

	if docker {
		if err := checkDockerrun(cmd, len(envFrom) > 0 || len(envSet) > 0); err != nil {
			return bad("%v", err)
		}
	}
	filter, err := parseFilter(headers, path, len(serveArgs) > 0)
	if err != nil {
		return bad("%v", err)
	}
	var serves []Serve
	for _, v := range serveArgs {
		s, err := ParseServe(v)
		if err != nil {
			return bad("%v", err)
		}
		if s.UDP && !filter.Empty() {
			return bad("-s %s is a UDP port, and --header and --path route HTTP requests; serve the UDP name in a run of its own, without them", s)
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
	for _, v := range envSet {
		if err := parseSetting(v); err != nil {
			return bad("%v", err)
		}
	}
	keep, err := parseKeep(envKeep)
	if err != nil {
		return bad("%v", err)
	}
	p := &plan{client: client, cmd: cmd, set: envSet, docker: docker, filter: filter}
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
	for _, v := range volumeArgs {
		profile, req, local, err := parseVolume(v)
		if err != nil {
			return bad("%v", err)
		}
		t := p.targets[0]
		switch {
		case profile != "" && byName[profile] == nil:
			return bad("--volume %s names profile %q, which is not one of this run's profiles (%s); add -p %s", v, profile, strings.Join(names, ", "), profile)
		case profile != "":
			t = byName[profile]
		case len(p.targets) > 1:
			return bad("--volume %s: the run has several profiles (%s); say whose workload it is, e.g. --volume %s/%s", v, strings.Join(names, ", "), names[0], v)
		}
		if len(p.volumes) == tunnel.MaxRunVolumes {
			return bad("at most %d --volume a run", tunnel.MaxRunVolumes)
		}
		p.volumes = append(p.volumes, &volumePlan{spec: v, req: req, local: local, target: t})
	}
	if len(envFrom) == 1 {
		profile, req, err := parseEnvFrom(envFrom[0])
		if err != nil {
			return bad("%v", err)
		}
		t := p.targets[0]
		switch {
		case profile != "" && byName[profile] == nil:
			return bad("--env-from %s names profile %q, which is not one of this run's profiles (%s); add -p %s", envFrom[0], profile, strings.Join(names, ", "), profile)
		case profile != "":
			t = byName[profile]
		case len(p.targets) > 1:
			return bad("--env-from %s: the run has several profiles (%s); say whose workload it is, e.g. --env-from %s/%s", envFrom[0], strings.Join(names, ", "), names[0], envFrom[0])
		}
		p.env = &envPlan{req: req, target: t, file: envFile, jsonFile: envJSON, set: envSet, keep: keep}
		p.set = nil
	}
	return p, nil
}

// parseFilter makes the run's Filter of its --header and --path values,
// which only a run with -s may have.
func parseFilter(headers []string, path string, serves bool) (tunnel.Filter, error) {
	f := tunnel.Filter{Path: path}
	if (len(headers) > 0 || path != "") && !serves {
		return f, errors.New("--header and --path make a takeover personal, and go with -s: plug -s web:8080:3000 --header 'X-Dev=alice' -- npm start")
	}
	for _, v := range headers {
		h, err := tunnel.ParseHeaderMatch(v)
		if err != nil {
			return f, err
		}
		f.Headers = append(f.Headers, h)
	}
	return f, f.Check()
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
  ` + installerHint + `
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
	_, comment, _ := store.PublicKey(name) // the signer's: a key without its .pub file has no comment
	return &target{profile: prof, user: userFor(prof), signer: signer, hostKey: hostKey, comment: comment}, nil
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
