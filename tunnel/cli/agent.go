package cli

import (
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/crypto/ssh"

	"plug/k8sapi/kubeplatform"
	"plug/keys"
	"plug/swarmapi"
	"plug/tunnel"
)

var agentCommand = &command{
	name:     "agent",
	synopsis: "run the agent inside a cluster (the image's entrypoint)",
	usage: `Usage: plug agent

Runs plug's agent: the SSH server in the cluster that developers' plug runs
connect to. It is configured by its environment:

  PLUG_PLATFORM     the kind of cluster it runs in: ` + strings.Join(platformNames(), "; ") + `
  PLUG_ADDR         the address to listen on (MEERKAT_PLUG_ADDR also works), default :2222
  PLUG_STATE_DIR    where its host key is kept, default /var/lib/plug
  PLUG_BIN_DIR      the CLI binaries it hands out to installers, default /bin
  PLUG_PUBLIC_ADDR  host:port developers reach it by, for the installer
  PLUG_AGENT_ID     this agent's name in the cluster, default the host name

It checks its rights in the cluster at boot. Without a right that runs need
it does not start serving: its log names each missing rule with the command
that grants it, it refuses every run with the same words, and it answers
plug doctor, which prints them on the developer's terminal. It checks again
every 30 s and serves runs once the rights are granted, with no restart. A
missing optional right is logged, and its feature is off.

SIGTERM or SIGINT stop it; the names it serves are given back first.
`,
	run: func(c *cli, args []string) error {
		fs := flags("agent")
		pos, err := c.parse("agent", fs, args, true)
		if err != nil {
			return err
		}
		if len(pos) > 0 {
			return usageError("agent", "agent takes no arguments, it reads its environment; got %q", pos[0])
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return c.agent(ctx)
	},
}

// newPlatform makes the Platform named by PLUG_PLATFORM. A new platform is
// one more case here, and its name in platformNames.
func newPlatform(ctx context.Context, name string, logf func(string, ...any)) (tunnel.Platform, error) {
	switch name {
	case "memory", "none":
		return tunnel.NewMemoryPlatform(), nil
	case "kubernetes":
		p, err := kubeplatform.NewFromEnv(logf)
		if err != nil {
			return nil, err
		}
		return p, nil
	case "swarm":
		p, err := swarmapi.NewPlatformFromEnv(ctx, logf)
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
		"kubernetes (a pod of deploy/plug-k8s.yaml, with the downward API's POD_NAME, POD_NAMESPACE and POD_IP)",
		"swarm (a Docker Swarm service with the engine's socket, deploy/plug-swarm.yml)",
		"memory or none (no cluster: names live in the agent's memory, for local tests)",
	}
}

// sharedHostKey is a platform that keeps the agent's host key in the
// cluster, so that every replica, and every restart, presents the same one.
type sharedHostKey interface {
	HostKey(ctx context.Context) (ssh.Signer, error)
}

// loadHostKey is the platform's shared host key, or else the one kept in
// PLUG_STATE_DIR.
func loadHostKey(ctx context.Context, platform tunnel.Platform) (ssh.Signer, error) {
	if shared, ok := platform.(sharedHostKey); ok {
		return shared.HostKey(ctx)
	}
	return tunnel.LoadOrCreateHostKey(envOr("PLUG_STATE_DIR", "/var/lib/plug"))
}

func (c *cli) agent(ctx context.Context) error {
	logger := log.New(c.stderr, "plug agent: ", log.LstdFlags)
	platform, err := newPlatform(ctx, os.Getenv("PLUG_PLATFORM"), logger.Printf)
	if err != nil {
		return err
	}
	hostKey, err := loadHostKey(ctx, platform)
	if err != nil {
		return err
	}
	id := os.Getenv("PLUG_AGENT_ID")
	if id == "" {
		id, _ = os.Hostname()
	}
	addr := tunnel.ListenAddr()
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
		Logf:       logger.Printf,
	}
	logger.Printf("%s %s listening on %s, host key %s", id, tunnel.Version, l.Addr(), keys.Fingerprint(hostKey.PublicKey()))
	return a.Serve(ctx, l)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
