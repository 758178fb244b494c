package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"

	"plug/keys"
	"plug/tunnel"
	"plug/tunnel/cli/ui"
)

// uiUsage is the usage of plug ui.
const uiUsage = `Usage: plug ui [-p PROFILE] [--listen 127.0.0.1:PORT] [--no-open]

Serves a page about PROFILE's cluster on this machine, opens it in the
browser when there is one, and prints its address until Ctrl-C:

  the agent      its address, version, admission, whether the tunnel serves
                 runs (or why not), its rights, and the install commands of
                 macOS, Linux and Windows with its address and host key
  plugged in     one row per run, as plug who lists them, each name served
                 with its grid, and End with a reason (as plug end)
  people         with admission by approval: the pending requests (accept,
                 refuse), the members (remove) and the admins
  audit trail    the runs, names and changes the agent keeps in the cluster,
                 searched by name served, developer, key and time range

The page reads the agent with the profile's key, live: it sees and changes
exactly what plug who, plug end and plug members would (a plain key its own
runs; members and admins every run and the audit trail).

  --listen ADDR  where to serve the page: a loopback address only
                 [127.0.0.1:0, a free port]
  --no-open      print the address, do not open a browser

The address carries a token made anew at each start: without it the page
shows nothing and changes nothing. The page answers requests for its own
address only (not another name for it), refuses requests of other sites,
and takes changes only by POST with the token.

Examples:
  plug ui -p prod
  plug ui -p prod --listen 127.0.0.1:8765 --no-open
`

// runUI is plug ui.
func runUI(c *cli, args []string) error {
	fs := flags("ui")
	listen := fs.String("listen", "127.0.0.1:0", "")
	noOpen := fs.Bool("no-open", false, "")
	store, name, pos, err := c.profileAndArgs("ui", fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("ui", "ui takes no arguments, got %q", pos[0])
	}
	host, _, err := net.SplitHostPort(*listen)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return usageError("ui", "--listen %s: give a loopback address and port, e.g. 127.0.0.1:8765 (the page is for this machine only)", tunnel.PeerText(*listen))
	}
	agent, info, err := uiAgent(store, name)
	if err != nil {
		return err
	}
	srv, err := ui.New(agent, info)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("cannot listen on %s (%v); give another --listen", *listen, err)
	}
	url := srv.URL(l)
	fmt.Fprintf(c.stdout, "plug ui: %s\n", url)
	fmt.Fprintf(c.stderr, "plug: the page of %s is served at the address above until Ctrl-C; it holds a token: do not share it\n", name)
	if !*noOpen {
		if err := openBrowser(url); err != nil {
			fmt.Fprintf(c.stderr, "plug: no browser opened (%v): open the address yourself\n", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return srv.Serve(ctx, l)
}

// uiAgent is profile name's agent as the page asks it, and what the page
// says of the profile.
func uiAgent(store keys.Store, name string) (ui.Agent, ui.Info, error) {
	t, err := loadTarget(store, name)
	if err != nil {
		return nil, ui.Info{}, err
	}
	cfg := tunnel.ClientConfig{Addr: t.profile.Addr(), User: t.user, Signer: t.signer, HostKey: t.hostKey, Profile: name}
	info := ui.Info{Profile: name, Host: t.profile.Host, Port: t.profile.Port, HostKey: keys.Fingerprint(t.hostKey),
		Key: keys.Fingerprint(t.signer.PublicKey()), User: t.user}
	return profileAgent{cfg}, info, nil
}

// profileAgent asks an agent with a profile's key, as plug who, plug
// end, plug members and plug doctor do.
type profileAgent struct{ cfg tunnel.ClientConfig }

func (p profileAgent) Who(ctx context.Context) ([]tunnel.Plugged, bool, error) {
	return tunnel.Who(ctx, p.cfg)
}

func (p profileAgent) End(ctx context.Context, run, reason string) (tunnel.Ended, error) {
	return tunnel.End(ctx, p.cfg, run, reason)
}

func (p profileAgent) Members(ctx context.Context, op, key, reason string) (tunnel.MemberList, string, error) {
	return tunnel.ManageMembers(ctx, p.cfg, op, key, reason)
}

func (p profileAgent) Status(ctx context.Context) (*tunnel.Diagnosis, error) {
	return tunnel.Diagnose(ctx, p.cfg)
}

func (p profileAgent) SearchAudit(ctx context.Context, q tunnel.AuditQuery) ([]tunnel.AuditEvent, error) {
	return tunnel.SearchAudit(ctx, p.cfg, q)
}
