package cli

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/k8sapi/kubeplatform"
	"plug/keys"
	"plug/swarmapi/swarmplatform"
	"plug/tunnel"
	"plug/tunnel/memplatform"
)

// agentUsage is the usage of plug agent.
var agentUsage = `Usage: plug agent [--ready]
       plug agent members ... (the operator's side of admission by approval;
                               plug agent members -h)
       plug agent host-key rotate (a new SSH host key; plug agent host-key -h)

Runs plug's agent: the SSH server in the cluster that developers' plug runs
connect to. It is configured by its environment:

` + hanging("  PLUG_PLATFORM", 20, "the kind of cluster it runs in: "+strings.Join(platformNames(), "; ")) +
	`  PLUG_ADDR         the address to listen on (MEERKAT_PLUG_ADDR also works),
                    default :2222
  PLUG_STATE_DIR    where its host key is kept, default /var/lib/plug
  PLUG_BIN_DIR      the CLI binaries it hands out to installers, default /bin
  PLUG_PUBLIC_ADDR  host:port developers reach it by, for the installer
  PLUG_AGENT_ID     this agent's name in the cluster, default the host name
  PLUG_TUNNEL       open (the default) or closed: the operator's switch; closed,
                    the agent refuses every run saying so (a rollout with it
                    ends every run, with that reason)
  PLUG_ADMISSION    open (the default: any key that reaches it gets in) or
                    invite (admission by approval: only the keys a member
                    accepted; plug members)
  PLUG_OPEN_SERVE   what a key that is neither member nor admin may serve:
                    takeover (the default: new names, and deployed services
                    taken over), new (new names only) or none
  PLUG_OPEN_ENV_SECRETS  on (the default) or off: off refuses such a key an
                    --env-from whose values come from a Secret
  PLUG_OPEN_VOLUMES read-write (the default), read-only or off: the volumes
                    (--volume) such a key may mount
  PLUG_METRICS_ADDR host:port of the metrics (Prometheus text format, at
                    /metrics), e.g. :9090; default none: no metrics
  PLUG_DIAL         address ranges runs may dial beyond the cluster's names,
                    e.g. 10.0.0.0/8,fd00::/8 (default none); an address the
                    agent refuses by default (the node's, the API server's,
                    loopback, link-local, the clouds' metadata addresses such
                    as fd00:ec2::254, in any IPv6 form carrying them) only
                    when listed alone, e.g. 10.0.0.1/32
  PLUG_ALLOW_SHADOWING  Kubernetes: true lets runs serve the names of the
                    cluster's own Services (kubernetes, kube-dns...), refused
                    by default

On Kubernetes:
  POD_NAME, POD_NAMESPACE, POD_IP, HOST_IP
                    the agent's pod and its node's address, from the
                    downward API (deploy/plug-k8s.yaml sets them)
  NODE_NAME         the agent's node; unset, it is read from its own pod
  PLUG_NAMESPACES   other namespaces whose Services runs reach, e.g.
                    data,messaging (default none), each offered by a Role
                    plug-names there
  PLUG_HELPER_IMAGE the image of --volume helpers, default the agent pod's
  KUBECONFIG        outside a pod only: the kubeconfig, default ~/.kube/config

On Swarm:
  PLUG_SWARM_TASK   the agent's task, {{.Task.ID}} (deploy/plug-swarm.yml)
  DOCKER_HOST       the engine's API, default unix:///var/run/docker.sock

The Go runtime's GOMEMLIMIT, GOGC and GOMAXPROCS: unset, the agent keeps
its garbage collector under 90 % of its container's memory limit, lets at
most 64 MiB of garbage pile up between collections (GOGC 300, lowered to as
little as 100 as its live heap grows), and runs its Go code on one
processor, which carries streams at the least CPU per byte (the kernel's
work runs beside it); set GOMAXPROCS for an agent whose streams need more.

Caps, each counted on this agent (a number; default in brackets):
  PLUG_MAX_RUNS_PER_KEY          runs open at once for one key [` + strconv.Itoa(tunnel.DefaultLimits.RunsPerKey) + `]
  PLUG_MAX_NAMES_PER_KEY         names served at once for one key [` + strconv.Itoa(tunnel.DefaultLimits.NamesPerKey) + `]
  PLUG_MAX_CHANNELS_PER_KEY      connections through the agent, one key [` + strconv.Itoa(tunnel.DefaultLimits.ChannelsPerKey) + `]
  PLUG_MAX_CONNECTIONS_PER_KEY   SSH connections of one key [` + strconv.Itoa(tunnel.DefaultLimits.ConnsPerKey) + `]
  PLUG_MAX_MEMORY_PER_KEY        MiB of one key's data waiting to go [` + strconv.Itoa(tunnel.DefaultLimits.MemoryPerKey) + `]
  PLUG_MAX_CHANNELS              connections through the agent, all [` + strconv.Itoa(tunnel.DefaultLimits.Channels) + `*]
  PLUG_MAX_CONNECTIONS           SSH connections, all keys [` + strconv.Itoa(tunnel.DefaultLimits.Conns) + `*]
  PLUG_MAX_RUNS                  runs open at once, all keys [` + strconv.Itoa(tunnel.DefaultLimits.Runs) + `]
  PLUG_MAX_NAMES                 names served at once, all keys [` + strconv.Itoa(tunnel.DefaultLimits.Names) + `*]
  PLUG_MAX_VOLUMES               volumes served at once, all runs [` + strconv.Itoa(tunnel.DefaultLimits.Volumes) + `]
  PLUG_MAX_MEMORY                MiB of data waiting to go, all keys [` + strconv.Itoa(tunnel.DefaultLimits.Memory) + `*]
  * or less: lowered to what the agent's open-file limit and memory limit hold

Its log says its SSH host key's fingerprint at start, one line to give
developers. On Kubernetes the key is kept in the Secret plug-state, shared
by every replica; when the agent may not read or store it there, it starts
with a key of its own pod and says so in WARNING lines, with the command
that makes the key shared again. plug agent host-key rotate replaces it.

It checks its rights in the cluster at boot. Without a right that runs need
it does not start serving: its log names each missing rule with the command
that grants it, it refuses every run with the same words, and it answers
plug doctor, which prints them on the developer's terminal. It checks again
every 30 s and serves runs once the rights are granted, with no restart. A
missing optional right is logged, and its feature is off.

While it serves runs it keeps the file PLUG_STATE_DIR/ready. plug agent
--ready exits 0 when that file is there and 1 otherwise, saying why: it is
the readiness probe of deploy/plug-k8s.yaml, so that the agent's pod is not
Ready while it refuses runs for a missing right.

Its log is on standard error; its audit trail (each run opened and how it
ended, each name served and given back, each volume, each environment
read, each key refused, accepted or removed) is on standard output, one
JSON object per line (schema in deploy/README.md), and appended to
PLUG_AUDIT_FILE when set:

  PLUG_AUDIT_FILE      a file the audit trail is appended to as well
  PLUG_AUDIT_FILE_MAX  its bound in bytes: past it the file is renamed
                       FILE.1 and begun anew [` + strconv.Itoa(tunnel.DefaultAuditFileMax) + `]
  PLUG_AUDIT_DIALS     on: a run.dial event for each connection a run asks
                       the agent to make (-c, ssh -L): per key at most ` + strconv.Itoa(tunnel.AuditDialBurst) + `
                       at once, then one a second, the left-out ones counted
                       on the next event [off]

SIGTERM or SIGINT stop it; the names it serves are given back first. When
another agent takes over (a rollout) its runs move there; when every agent
is going away (scaled to zero, removed) the runs end, saying so.

Examples (the image's entrypoint runs it; by hand, for a local test):
  PLUG_PLATFORM=memory PLUG_STATE_DIR=./agent-state plug agent
  kubectl -n shop exec deploy/plug -- /plug agent members
`

// runAgent is plug agent.
func runAgent(c *cli, args []string) error {
	if len(args) > 0 && args[0] == "members" {
		if len(args) > 1 && (args[1] == "-h" || args[1] == "--help" || args[1] == "-help") {
			fmt.Fprint(c.stdout, agentMembersUsage)
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return c.agentMembers(ctx, args[1:])
	}
	if len(args) > 0 && args[0] == "host-key" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return c.agentHostKey(ctx, args[1:])
	}
	fs := flags("agent")
	ready := fs.Bool("ready", false, "")
	pos, err := c.parse("agent", fs, args, true)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("agent", "agent takes no arguments, it reads its environment; got %q", pos[0])
	}
	if *ready {
		return c.agentReady()
	}
	return c.agent(context.Background())
}

// newPlatform makes the Platform named by PLUG_PLATFORM. A new platform is
// one more case here, and its name in platformNames.
func newPlatform(ctx context.Context, name string, logf func(string, ...any)) (tunnel.Platform, error) {
	switch name {
	case "memory", "none":
		return memplatform.New(), nil
	case "kubernetes":
		p, err := kubeplatform.NewFromEnv(ctx, logf)
		if err != nil {
			return nil, err
		}
		return p, nil
	case "swarm":
		p, err := swarmplatform.NewFromEnv(ctx, logf)
		if err != nil {
			return nil, err
		}
		return p, nil
	case "":
		return nil, fmt.Errorf("no platform: set PLUG_PLATFORM to the kind of cluster this agent runs in: %s", strings.Join(platformNames(), "; "))
	}
	return nil, fmt.Errorf("PLUG_PLATFORM=%s is not a platform this agent knows; it knows: %s", name, strings.Join(platformNames(), "; "))
}

func platformNames() []string {
	return []string{
		"kubernetes (a pod of deploy/plug-k8s.yaml, with the downward API's POD_NAME, POD_NAMESPACE, POD_IP and HOST_IP)",
		"swarm (a Docker Swarm service with the engine's socket, deploy/plug-swarm.yml)",
		"memory or none (no cluster: names live in the agent's memory, for local tests)",
	}
}

// loadHostKey is the platform's shared host key, or else the one kept in
// PLUG_STATE_DIR.
func loadHostKey(ctx context.Context, platform tunnel.Platform) (ssh.Signer, error) {
	if shared, ok := platform.(tunnel.SharedHostKey); ok {
		return shared.HostKey(ctx)
	}
	return loadOrCreateHostKey(stateDir())
}

func (c *cli) agent(ctx context.Context) error {
	c.tuneRuntime()
	if os.Getenv("GOGC") == "" {
		tunnel.CapGarbage(gcPercent)
	}
	logger := log.New(c.stderr, "plug agent: ", log.LstdFlags)
	if soft := limitMemory("/sys/fs/cgroup"); soft > 0 {
		logger.Printf("the container's memory limit is %d MiB: the agent's garbage collector keeps it under %d MiB", int64(float64(soft)/memoryShare)>>20, soft>>20)
	}
	platform, err := newPlatform(ctx, os.Getenv("PLUG_PLATFORM"), logger.Printf)
	if err != nil {
		return err
	}
	hostKey, err := loadHostKey(ctx, platform)
	if err != nil {
		return err
	}
	admission, err := admissionOf(os.Getenv("PLUG_ADMISSION"), platform)
	if err != nil {
		return err
	}
	closed, err := tunnelSwitch(os.Getenv("PLUG_TUNNEL"))
	if err != nil {
		return err
	}
	id := os.Getenv("PLUG_AGENT_ID")
	if id == "" {
		id, _ = os.Hostname()
	}
	limits, dial, err := agentSettings()
	if err != nil {
		return err
	}
	open, err := tunnel.ParseOpenRules(os.Getenv)
	if err != nil {
		return err
	}
	auditDials, err := onOff("PLUG_AUDIT_DIALS", os.Getenv("PLUG_AUDIT_DIALS"))
	if err != nil {
		return err
	}
	audit, err := c.auditSink()
	if err != nil {
		return err
	}
	addr := listenAddr()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %v; set PLUG_ADDR to a free address", addr, err)
	}
	a := &tunnel.Agent{
		Platform:   platform,
		HostKey:    hostKey,
		BinDir:     envOr("PLUG_BIN_DIR", "/bin"),
		PublicAddr: os.Getenv("PLUG_PUBLIC_ADDR"),
		ID:         id,
		Limits:     limits,
		Dial:       dial,
		ReadyFile:  readyFile(),
		Logf:       logger.Printf,
		Audit:      audit,
		Closed:     closed,
		Open:       open,
		AuditDials: auditDials,
	}
	if admission != nil {
		a.Keys = admission
	}
	logger.Printf("%s %s listening on %s", id, tunnel.Version, l.Addr())
	logger.Print(fingerprintLine(keys.Fingerprint(hostKey.PublicKey()), a.PublicAddr))
	if closed != "" {
		logger.Printf("the tunnel is closed (%s): every run is refused, saying so", closed)
	}
	if set := open.String(); set != "" {
		logger.Printf("keys that are not members are narrowed: %s", set)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := serveMetrics(ctx, a, logger.Printf); err != nil {
		l.Close()
		return err
	}
	go stopOnSignal(ctx, a, platform, cancel, logger.Printf)
	defer keepAudit(a, platform, logger.Printf)()
	return a.Serve(ctx, l)
}

// keepAudit appends a's audit trail to the ring its platform keeps in the
// cluster, when it keeps one (tunnel.AuditSlots), until the returned
// function is called: it writes what is left and returns.
func keepAudit(a *tunnel.Agent, platform tunnel.Platform, logf func(string, ...any)) (stop func()) {
	slots, ok := platform.(tunnel.AuditSlots)
	if !ok {
		return func() {}
	}
	k := tunnel.NewAuditKeeper(slots, logf)
	a.Audit = fanOut([]func(tunnel.AuditEvent){a.Audit, k.Add})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		k.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// serveMetrics serves the agent's metrics on PLUG_METRICS_ADDR, when set,
// until ctx ends; they count what a's audit trail says, so a.Audit is
// wrapped. An address it cannot listen on is an error naming it.
func serveMetrics(ctx context.Context, a *tunnel.Agent, logf func(string, ...any)) error {
	addr := os.Getenv("PLUG_METRICS_ADDR")
	if addr == "" {
		return nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("PLUG_METRICS_ADDR=%s: cannot listen there (%v); give a free host:port, e.g. :9090, or unset it", tunnel.PeerText(addr), err)
	}
	m := &tunnel.Metrics{}
	audit := a.Audit
	a.Audit = func(e tunnel.AuditEvent) {
		audit(e)
		m.Observe(e)
	}
	logf("metrics at http://%s/metrics", l.Addr())
	go func() {
		if err := tunnel.ServeMetrics(ctx, l, a, m); err != nil {
			logf("metrics: %v", err)
		}
	}()
	return nil
}

// fingerprintLine is the line of the agent's log an operator copies to
// give developers: its host key's fingerprint, and the install command
// that checks it (HOST and PORT when the agent does not know its public
// address).
func fingerprintLine(fingerprint, publicAddr string) string {
	host, port, err := net.SplitHostPort(publicAddr)
	if err != nil {
		host, port = "HOST", "PORT"
	}
	return fmt.Sprintf("host key fingerprint %s (developers install with: ssh -p %s get@%s install | sh -s -- --fingerprint %s)", fingerprint, port, host, fingerprint)
}

// stopOnSignal stops the agent at SIGTERM or SIGINT: for good (Stop: the
// runs end, saying why) when the platform says every agent is going away,
// else as a restart (cancel: the runs move to another agent).
func stopOnSignal(ctx context.Context, a *tunnel.Agent, platform tunnel.Platform, cancel context.CancelFunc, logf func(string, ...any)) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	select {
	case <-sigs:
	case <-ctx.Done():
		return
	}
	if d, ok := platform.(tunnel.Departing); ok {
		askCtx, done := context.WithTimeout(ctx, 5*time.Second)
		why, err := d.Departing(askCtx)
		done()
		if err != nil {
			logf("cannot tell whether another agent takes over (%v): stopping as a restart", err)
		}
		if why != "" {
			logf("stopping for good: %s", why)
			a.Stop("the operator", why)
			return
		}
	}
	cancel()
}

// tunnelSwitch reads PLUG_TUNNEL: "" or "open", or "closed", which the
// agent's Closed names.
func tunnelSwitch(v string) (string, error) {
	switch v {
	case "", "open":
		return "", nil
	case "closed":
		return "PLUG_TUNNEL=closed", nil
	}
	return "", fmt.Errorf("PLUG_TUNNEL=%s is neither open nor closed", tunnel.PeerText(v))
}

// stateDir is where the agent keeps its files: PLUG_STATE_DIR.
func stateDir() string { return envOr("PLUG_STATE_DIR", "/var/lib/plug") }

// readyFile is the file the agent keeps while it serves runs.
func readyFile() string { return filepath.Join(stateDir(), "ready") }

// agentReady is plug agent --ready: whether the agent of this container
// serves runs.
func (c *cli) agentReady() error {
	if _, err := os.Stat(readyFile()); err != nil {
		fmt.Fprintf(c.stderr, "plug agent: not serving runs (no %s): it is starting, or lacks a right in the cluster that runs need (its log, and plug doctor, say which)\n", readyFile())
		return &exitCode{code: 1}
	}
	fmt.Fprintln(c.stdout, "plug agent: serving runs")
	return nil
}

// agentSettings reads the agent's caps and PLUG_DIAL from its
// environment; a value that does not parse is an error naming it.
func agentSettings() (tunnel.Limits, []netip.Prefix, error) {
	var l tunnel.Limits
	for _, f := range []struct {
		env string
		v   *int
	}{
		{"PLUG_MAX_RUNS_PER_KEY", &l.RunsPerKey}, {"PLUG_MAX_NAMES_PER_KEY", &l.NamesPerKey},
		{"PLUG_MAX_CHANNELS_PER_KEY", &l.ChannelsPerKey}, {"PLUG_MAX_CONNECTIONS_PER_KEY", &l.ConnsPerKey},
		{"PLUG_MAX_CHANNELS", &l.Channels}, {"PLUG_MAX_CONNECTIONS", &l.Conns},
		{"PLUG_MAX_MEMORY_PER_KEY", &l.MemoryPerKey}, {"PLUG_MAX_RUNS", &l.Runs}, {"PLUG_MAX_NAMES", &l.Names},
		{"PLUG_MAX_VOLUMES", &l.Volumes}, {"PLUG_MAX_MEMORY", &l.Memory},
	} {
		v := os.Getenv(f.env)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return l, nil, fmt.Errorf("%s=%q is not a number of at least 1; unset it for the default", f.env, v)
		}
		*f.v = n
	}
	dial, err := tunnel.ParseDial(os.Getenv("PLUG_DIAL"))
	return l, dial, err
}

// admissionOf is the admission PLUG_ADMISSION names: nil (open, nobody
// oversees others' runs) when the platform keeps no members, else Members,
// by approval for "invite".
func admissionOf(setting string, platform tunnel.Platform) (*tunnel.Members, error) {
	store, ok := platform.(tunnel.MemberStore)
	switch setting {
	case "", "open":
		if !ok {
			return nil, nil
		}
		return tunnel.NewMembers(store, false), nil
	case "invite":
		if !ok {
			return nil, errors.New("PLUG_ADMISSION=invite needs a platform that keeps the members (kubernetes or swarm); this one keeps none")
		}
		return tunnel.NewMembers(store, true), nil
	}
	return nil, fmt.Errorf("PLUG_ADMISSION=%s is neither open nor invite", tunnel.PeerText(setting))
}

// onOff reads the switch name: "" and "off" are false, "on" true.
func onOff(name, value string) (bool, error) {
	switch value {
	case "", "off":
		return false, nil
	case "on":
		return true, nil
	}
	return false, fmt.Errorf("%s=%s is neither on nor off", name, tunnel.PeerText(value))
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
