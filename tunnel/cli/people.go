package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"plug/keys"
	"plug/tunnel"
)

// whoUsage is the usage of plug who.
const whoUsage = `Usage: plug who [-p PROFILE]

Lists the runs plugged into PROFILE's cluster now, one line each, whichever
agent replica holds their connections:

  RUN      the run's id, for plug end
  USER     the developer's account, the fingerprint of their key and the
           key's comment; with open admission the fingerprint comes first,
           as it is the identity: the account is only the name their SSH
           client asserted, marked "(asserted)"
  FROM     the address their connection came from
  PLUG     their plug version
  SINCE    when the run was plugged in
  WHAT     serving, nothing served yet (a plug -s that has not served its
           name yet) or client only; "away" when its connection dropped and
           the agent keeps its names for it to come back; "in a local
           container (--dockerrun)" when CMD is a container on the
           developer's machine
  NAMES    each name served: parked (the deployed service is set aside, the
           workstation answers in its place) or added (a name the cluster
           did not have)

Who sees what: with admission by approval (PLUG_ADMISSION: invite) every
member sees every run; with open admission each developer sees the runs of
their own key, and the admins the operator named see every run.
-p may be left out when there is one profile. who opens no run and changes
nothing.

Example:
  plug who -p prod
`

// runWho is plug who.
func runWho(c *cli, args []string) error {
	store, name, err := c.profileOnly("who", args)
	if err != nil {
		return err
	}
	return ask(store, name, func(ctx context.Context, cfg tunnel.ClientConfig) error {
		runs, all, err := tunnel.Who(ctx, cfg)
		if err != nil {
			return err
		}
		writeWho(c.stdout, runs, time.Now())
		switch {
		case len(runs) == 0 && all:
			fmt.Fprintf(c.stderr, "plug: nobody is plugged into %s\n", name)
		case len(runs) == 0:
			fmt.Fprintf(c.stderr, "plug: no run of your key is plugged into %s (you see your own runs only)\n", name)
		case !all:
			fmt.Fprintln(c.stderr, "plug: these are your key's runs only; members (with admission by approval) and admins see everyone's")
		}
		return nil
	})
}

// writeWho writes the table of plug who.
func writeWho(w io.Writer, runs []tunnel.Plugged, now time.Time) {
	if len(runs) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tUSER\tFROM\tPLUG\tSINCE\tWHAT\tNAMES")
	for _, r := range runs {
		user := r.User + " " + r.Key
		if r.UserAsserted {
			user = r.Key + " " + r.User + " (asserted)"
		}
		if r.Comment != "" {
			user += " " + r.Comment
		}
		version := r.Version
		if r.Kind == tunnel.KindOpenSSH {
			version = "(OpenSSH)"
		}
		what := r.What()
		if r.Container == tunnel.ContainerDockerrun {
			what += ", in a local container (--dockerrun)"
		}
		if r.Away {
			what += ", away"
		}
		var names []string
		for _, n := range r.Names {
			name := fmt.Sprintf("%s:%d %s", n.Name, n.Port, n.Mode)
			if n.Filter != "" {
				name += " (personal: " + n.Filter + ")"
			}
			names = append(names, name)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Run, user, strings.Join(r.From, ","), version,
			since(r.Since, now), what, strings.Join(names, ", "))
	}
	tw.Flush()
}

// since says when t was: the time of day today, else the date too.
func since(t, now time.Time) string {
	t = t.Local()
	ago := now.Sub(t).Round(time.Second)
	if y, m, d := t.Date(); y == now.Year() && m == now.Month() && d == now.Day() {
		return fmt.Sprintf("%s (%s ago)", t.Format("15:04:05"), ago)
	}
	return t.Format("2006-01-02 15:04")
}

// endUsage is the usage of plug end.
const endUsage = `Usage: plug end [-p PROFILE] RUN --reason TEXT

Ends the run RUN (its id as plug who shows it, or enough of its beginning to
name one run): the developer's command is stopped as Ctrl-C would stop it,
their terminal shows who ended it (your account and key) and TEXT, and every
name it served is given back at once, whichever agent replica holds which of
its connections: a parked service is restored, an added name removed. It is
not a ban: the developer may plug in again as long as their key is let in
(plug members deny takes a key back).

plug end waits until the run is gone from plug who (everything it set aside
is back), up to 15 s.

Who may end what: with admission by approval (PLUG_ADMISSION: invite) every
member may end any run; with open admission each developer ends the runs of
their own key, and the admins the operator named end any run.

  --reason TEXT  why, in one line, for the developer (required)

Exit codes: 0 the run ended; 1 refused or failed (nothing was ended); 2 bad
usage.

Example:
  plug end -p prod 6fa393ab --reason 'the demo starts in 5 minutes'
`

// runEnd is plug end.
func runEnd(c *cli, args []string) error {
	fs := flags("end")
	reason := fs.String("reason", "", "")
	store, name, pos, err := c.profileAndArgs("end", fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError("end", "end takes one run id (plug who lists them), got %d arguments", len(pos))
	}
	if strings.TrimSpace(*reason) == "" {
		return usageError("end", "end needs --reason TEXT: the developer reads it in their terminal")
	}
	return ask(store, name, func(ctx context.Context, cfg tunnel.ClientConfig) error {
		ended, err := tunnel.End(ctx, cfg, pos[0], *reason)
		if err != nil {
			return err
		}
		if awaitGone(ctx, cfg, ended.Run, 15*time.Second) {
			fmt.Fprintf(c.stderr, "plug: ended run %s of %s (%s); everything it set aside is back\n", ended.Run, ended.User, ended.Key)
			return nil
		}
		fmt.Fprintf(c.stderr, "plug: run %s of %s (%s) is ended; some replica is still giving its names back (plug who -p %s shows it until done)\n", ended.Run, ended.User, ended.Key, name)
		return nil
	})
}

// awaitGone waits up to timeout for run to be gone from plug who.
func awaitGone(ctx context.Context, cfg tunnel.ClientConfig, run string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		runs, _, err := tunnel.Who(ctx, cfg)
		if err == nil && !slices.ContainsFunc(runs, func(p tunnel.Plugged) bool { return p.Run == run }) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(250 * time.Millisecond):
		}
	}
	return false
}

// ask asks profile name's agent one question (who, end, members) with the
// profile's key: q gets how to reach the agent (questionConfig) and a
// context that ends a minute after ask began; ask returns what q returns.
func ask(store keys.Store, name string, q func(ctx context.Context, cfg tunnel.ClientConfig) error) error {
	cfg, err := questionConfig(store, name)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return q(ctx, cfg)
}

// questionConfig is how to reach profile name's agent to ask it questions
// with the profile's key.
func questionConfig(store keys.Store, name string) (tunnel.ClientConfig, error) {
	t, err := loadTarget(store, name)
	if err != nil {
		return tunnel.ClientConfig{}, err
	}
	return tunnel.ClientConfig{Addr: t.profile.Addr(), User: t.user, Signer: t.signer, HostKey: t.hostKey, Profile: name}, nil
}
