package cli

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/keys"
	"plug/tunnel"
	"plug/tunnel/localnames"
)

// doctorUsage is the usage of plug doctor.
const doctorUsage = `Usage: plug doctor [-p PROFILE]

Checks, one line each, what a run of PROFILE needs: the profile and its key
pair, that the agent answers (and how to reach it when it does not), that it
presents the host key the profile pins, that it accepts the key, that the
versions of plug on both ends work together, and every right the agent has
or lacks in the cluster. For a right it lacks, doctor prints the one command
that grants that right alone (on Kubernetes, a kubectl patch of the agent's
Role). On Swarm the rights are the agent's Docker socket, the engine's
version, a manager node and the application's networks.

doctor opens no run and changes nothing. It also works when the agent lacks
rights and refuses runs: the agent answers doctor all the same.
-p may be left out when there is one profile.

Each line starts with ok, warn (a feature is off, the rest works) or FAIL.
Exit codes: 0 nothing failed; 1 something failed (the lines say what to do);
2 bad usage.

Example:
  plug doctor -p prod
`

// runDoctor is plug doctor.
func runDoctor(c *cli, args []string) error {
	store, name, err := c.profileOnly("doctor", args)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := &doctor{out: c.stdout}
	d.examine(ctx, store, name)
	d.names()
	if d.failed > 0 {
		return &exitCode{ExitFailed, fmt.Errorf("doctor: %d check(s) failed", d.failed)}
	}
	return nil
}

// doctor writes the findings of plug doctor, one line each.
type doctor struct {
	out    io.Writer
	failed int
}

func (d *doctor) ok(format string, args ...any) { d.line("ok  ", format, args...) }
func (d *doctor) warn(format string, args ...any) {
	d.line("warn", format, args...)
}
func (d *doctor) fail(format string, args ...any) {
	d.failed++
	d.line("FAIL", format, args...)
}

// line writes one finding; lines after the first of its text are indented
// under it.
func (d *doctor) line(mark, format string, args ...any) {
	text := strings.ReplaceAll(fmt.Sprintf(format, args...), "\n", "\n     ")
	fmt.Fprintf(d.out, "%s %s\n", mark, text)
}

// names says how a run would make the cluster's names resolve on this
// machine: as its command looks them up, or all at start (then a run
// listens on at most maxListeners ports), and what would change that.
func (d *doctor) names() {
	how, improvable := localnames.Mode()
	if !improvable {
		d.ok("names: %s", how)
		return
	}
	d.warn("names: %s; a run listens on at most %d ports, so in a larger namespace some names do not answer", how, maxListeners)
}

// examine checks profile name of store and its agent.
func (d *doctor) examine(ctx context.Context, store keys.Store, name string) {
	prof, err := store.Profile(name)
	if err != nil {
		d.fail("profile %s: %v", name, err)
		return
	}
	hint := ""
	if prof.Platform != "" {
		hint = ", " + prof.Platform
	}
	d.ok("profile %s: agent at %s as user %s%s", name, prof.Addr(), userFor(prof), hint)
	pinned, _ := prof.PinnedKey() // Profile checked it

	signer, err := store.Signer(name)
	haveKey := err == nil
	var nokey *keys.NoKeyError
	switch {
	case haveKey:
		d.ok("key pair %s: %s", store.KeyPath(name), keys.Fingerprint(signer.PublicKey()))
	case errors.As(err, &nokey):
		d.fail("no key pair for profile %s (%s): generate it with plug keygen -p %s, then deposit what plug pubkey -p %s prints", name, nokey.Path, name, name)
	default:
		d.fail("key pair of profile %s: %v", name, err)
	}
	if !haveKey {
		// A key of the moment still shows whether the agent answers and
		// which host key it presents; the agent refuses it, as expected.
		_, priv, _ := ed25519.GenerateKey(rand.Reader)
		signer, _ = ssh.NewSignerFromKey(priv)
	}

	diag, err := tunnel.Diagnose(ctx, tunnel.ClientConfig{
		Addr: prof.Addr(), User: userFor(prof), Signer: signer, HostKey: pinned, Profile: name,
	})
	var unreach *tunnel.UnreachableError
	var hostKey *tunnel.HostKeyError
	var auth *tunnel.AuthError
	switch {
	case errors.As(err, &unreach):
		d.fail("agent at %s: %s\n%s", prof.Addr(), unreach.Reason, reachHint(prof, unreach.Reason))
		return
	case errors.As(err, &hostKey):
		d.ok("agent at %s answers", prof.Addr())
		d.fail("host key: %v", hostKey)
		return
	case errors.As(err, &auth):
		d.ok("agent at %s answers", prof.Addr())
		d.ok("host key %s matches the one the profile pins", keys.Fingerprint(pinned))
		if haveKey {
			d.fail("%v", auth)
		}
		return
	case err != nil:
		d.fail("agent at %s: %v", prof.Addr(), err)
		return
	}
	d.ok("agent at %s answers (SSH handshake in %s)", prof.Addr(), diag.Handshake.Round(time.Millisecond))
	d.ok("host key %s matches the one the profile pins", keys.Fingerprint(pinned))
	d.ok("the agent accepts the key %s (user %s)", keys.Fingerprint(signer.PublicKey()), userFor(prof))
	d.agent(diag, name)
}

// agent reports the agent's versions, status and rights.
func (d *doctor) agent(diag *tunnel.Diagnosis, profile string) {
	st := diag.Status
	agentVersion := diag.AgentVersion
	if st != nil && st.Version != "" {
		agentVersion = st.Version
	}
	if ok, why := tunnel.Compatible(tunnel.Version, agentVersion, profile); ok {
		d.ok("versions: %s", why)
	} else {
		d.fail("versions: %s", why)
	}
	if st == nil {
		d.fail("the agent (plug %s) does not answer doctor's status request: it is older than this CLI; update it (re-apply its manifest with a newer image) to see its rights here, or read them in its log", agentVersion)
		return
	}
	where := st.Agent
	if st.Platform != "" {
		where += " on " + st.Platform
	}
	if st.Refusing != "" {
		d.fail("agent %s: %s", where, st.Refusing)
	} else {
		d.ok("agent %s: serves runs", where)
	}
	d.rights(st, true)
}

// rights reports the rights st says the agent has (when granted is true)
// and lacks, each missing one with the command that grants it alone.
func (d *doctor) rights(st *tunnel.AgentStatus, granted bool) {
	if st.RightsError != "" {
		d.fail("the agent cannot check its rights: %s", st.RightsError)
	}
	for _, g := range groupRights(st.Rights) {
		if granted && len(g.granted) > 0 {
			d.ok("%s: %s", joinRules(g.granted), g.feature)
		}
		for _, r := range g.missing {
			fix := ""
			if r.Fix != "" {
				fix = "\ngrant it alone with:\n  " + r.Fix
			}
			if r.Required {
				d.fail("missing right %s, which runs need (%s)%s", r.Rule, g.feature, fix)
			} else {
				d.warn("missing right %s: that feature is off (%s)%s", r.Rule, g.feature, fix)
			}
		}
	}
}

// rightGroup is the rights behind one feature.
type rightGroup struct {
	feature          string
	granted, missing []tunnel.Right
}

// groupRights gathers rights by feature, in the order they come.
func groupRights(rights []tunnel.Right) []*rightGroup {
	var out []*rightGroup
	byFeature := map[string]*rightGroup{}
	for _, r := range rights {
		g := byFeature[r.Feature]
		if g == nil {
			g = &rightGroup{feature: r.Feature}
			byFeature[r.Feature] = g
			out = append(out, g)
		}
		if r.Granted {
			g.granted = append(g.granted, r)
		} else {
			g.missing = append(g.missing, r)
		}
	}
	return out
}

// joinRules names rules in few words: "get, list, patch services" when
// they are verbs on one resource.
func joinRules(rights []tunnel.Right) string {
	var verbs, rules []string
	resource := ""
	for _, r := range rights {
		rules = append(rules, r.Rule)
		verb, res, ok := strings.Cut(r.Rule, " ")
		if !ok || (resource != "" && res != resource) {
			return strings.Join(rules, "; ")
		}
		resource = res
		verbs = append(verbs, verb)
	}
	if len(verbs) < 2 {
		return strings.Join(rules, "; ")
	}
	return strings.Join(verbs, ", ") + " " + resource
}

// reachHint says how the agent of prof is usually reached, for an agent
// that could not be, by what went wrong.
func reachHint(prof keys.Profile, reason string) string {
	var why string
	switch reason {
	case "DNS lookup failed":
		why = fmt.Sprintf("The host name %s does not resolve from this machine: check the profile's host (plug ls), or use a node's address.", prof.Host)
	case "connection refused":
		why = fmt.Sprintf("Nothing listens on port %d there: the agent is not running, or is published on another port.", prof.Port)
	case "timed out":
		why = "Nothing answered: a firewall drops the connection, or the address is not the cluster's."
	default:
		why = "The connection failed."
	}
	switch prof.Platform {
	case "swarm":
		return why + "\nOn Swarm the agent is published on port 2222 of the managers (docker service ps plug_agent shows where it runs;\nwith PLUG_PUBLISH_MODE=host only that node answers)."
	case "gateway":
		return why + "\nThe gateway's developer tunnel listens on 22222: check the address recorded on its Infra, Plug page, and that the tunnel is open."
	}
	return why + "\nOn Kubernetes the agent is reached on NodePort 32222 of any node's address (kubectl -n NAMESPACE get pods,svc -l app.kubernetes.io/name=plug\nshows whether it runs), or through\n  kubectl -n NAMESPACE port-forward svc/plug 2222:2222\nwith a profile at 127.0.0.1:2222 (plug profile add NAME --host 127.0.0.1 --port 2222 --host-key ...)."
}
