package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/tunnel"
)

// membersUsage is the usage of plug members.
const membersUsage = `Usage: plug members [-p PROFILE]
       plug members accept|refuse [-p PROFILE] SHA256:...
       plug members remove [-p PROFILE] SHA256:... [--reason TEXT]
       plug members deny [-p PROFILE] SHA256:... [--reason TEXT]
       plug members undeny [-p PROFILE] SHA256:...

With admission by approval (the agent's PLUG_ADMISSION: invite), only the
keys a member accepted get in. A key that is not a member is refused with
its fingerprint and the command that accepts it, and its request is kept as
pending (at most 50, forgotten after 7 days without a new try).

  plug members            lists the members (fingerprint, account, who
                          accepted them, since when), the pending requests
                          and the keys removed lately
  accept SHA256:...       lets the key of a pending request (or one removed
                          lately) in, for the account it asked as: a key
                          belongs to one account
  refuse SHA256:...       forgets a pending request; the key may ask again
  remove SHA256:...       takes a member's key back: what it has open ends at
                          once, on every agent replica, and its developer
                          reads who removed it and TEXT (--reason)
  deny SHA256:...         takes a key back whatever the admission: what it
                          has open ends on every agent replica, its
                          developer reads who denied it and TEXT (--reason),
                          and it is refused until undeny
  undeny SHA256:...       lifts a denial

Every member may do all of this. With open admission (the default) there
are no members: the admins the operator named list the keys denied and
deny or undeny keys (not their own). The changes are in the agent's audit
trail with who made them. A change that makes no sense (a fingerprint that
is not pending, not a member, or malformed; removing the last member;
denying a key twice) is refused and changes nothing. The first member is
set by the cluster's operator (deploy/README.md, Admission by approval).
-p may be left out when there is one profile.

Examples:
  plug members -p prod
  plug members accept -p prod SHA256:Qj5VdDZl6PqCj9Zc3LZR4Gki/jHJ+oCzt97rkKPX2tU
  plug members remove -p prod SHA256:Qj5V... --reason 'laptop stolen'
  plug members deny -p prod SHA256:Qj5V... --reason 'key leaked'
`

// runMembers is plug members.
func runMembers(c *cli, args []string) error {
	op := "list"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		op, args = args[0], args[1:]
	}
	if op != "list" && op != "accept" && op != "refuse" && op != "remove" && op != "deny" && op != "undeny" {
		return usageError("members", "members: %q is not accept, refuse, remove, deny or undeny", op)
	}
	fs := flags("members")
	reason := fs.String("reason", "", "")
	store, name, pos, err := c.profileAndArgs("members", fs, args)
	if err != nil {
		return err
	}
	key := ""
	switch {
	case op == "list" && len(pos) > 0:
		return usageError("members", "members lists with no argument; to change one: plug members accept|refuse|remove|deny|undeny -p %s SHA256:...", name)
	case op != "list" && len(pos) != 1:
		return usageError("members", "members %s takes one key fingerprint, SHA256:..., as the refusal or plug members printed it", op)
	case op != "list":
		key = pos[0]
		if err := tunnel.CheckFingerprint(key); err != nil {
			return usageError("members", "%v", err)
		}
	}
	if *reason != "" && op != "remove" && op != "deny" {
		return usageError("members", "--reason goes with remove and deny only")
	}
	return ask(store, name, func(ctx context.Context, cfg tunnel.ClientConfig) error {
		l, done, err := tunnel.ManageMembers(ctx, cfg, op, key, *reason)
		if err != nil {
			return err
		}
		if done != "" {
			fmt.Fprintf(c.stderr, "plug: %s\n", done)
			return nil
		}
		writeMembers(c.stdout, l, time.Now())
		return nil
	})
}

// writeMembers writes the member list for people.
func writeMembers(w io.Writer, l tunnel.MemberList, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "MEMBER\tUSER\tCOMMENT\tACCEPTED BY\tSINCE\n")
	for _, m := range l.Members {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.Key, m.User, m.Comment, m.By, since(m.Since, now))
	}
	if len(l.Pending) > 0 {
		fmt.Fprintf(tw, "\nPENDING\tUSER\tFROM\tFIRST TRIED\tLAST TRIED\n")
		for _, r := range l.Pending {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Key, r.User, r.From, since(r.First, now), since(r.Last, now))
		}
	}
	if len(l.Removed) > 0 {
		fmt.Fprintf(tw, "\nREMOVED\tUSER\tREMOVED BY\tWHEN\tWHY\n")
		for _, r := range l.Removed {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Key, r.User, r.RemovedBy, since(r.At, now), r.Reason)
		}
	}
	if len(l.Admins) > 0 {
		fmt.Fprintf(tw, "\nADMIN (open admission)\n")
		for _, a := range l.Admins {
			fmt.Fprintf(tw, "%s\n", a)
		}
	}
	if len(l.Denied) > 0 {
		fmt.Fprintf(tw, "\nDENIED\tDENIED BY\tWHEN\tWHY\n")
		for _, d := range l.Denied {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", d.Key, d.By, since(d.At, now), d.Reason)
		}
	}
	tw.Flush()
}

// agentMembersUsage is the usage of plug agent members.
const agentMembersUsage = `Usage: plug agent members [list]
       plug agent members add --user NAME 'ssh-ed25519 AAAA... [comment]'
       plug agent members accept|refuse|remove|admin|unadmin SHA256:...
       plug agent members deny SHA256:... [--reason TEXT]
       plug agent members undeny SHA256:...
       plug agent members reset --yes

The operator's side of admission and of the deny list, run in the agent's
container, where its environment names the cluster's member store (on
Kubernetes the Secret plug-members):

  kubectl -n NAMESPACE exec deploy/plug -- /plug agent members add --user alice 'ssh-ed25519 AAAA... alice@laptop'

  add --user NAME KEY     makes the public key KEY (as plug pubkey prints it)
                          a member for the account NAME: the first member
  accept, refuse, remove  as plug members does, by the operator
  admin, unadmin          with open admission, lets the key see and end every
                          run (plug who, plug end), and deny keys, or no
                          longer
  deny SHA256:...         takes the key back whatever the admission: what
                          it has open ends on every replica, with TEXT
                          (--reason), and it is refused until undeny
  undeny SHA256:...       lifts a denial
  reset --yes             forgets every member, pending request, removal and
                          admin (not the denied keys): with admission by
                          approval nobody gets in until add sets a first
                          member again
  list                    the list, as plug members prints it

Each change is written as one audit line (JSON) to the agent's audit trail:
the agent's standard output (kubectl logs), PLUG_AUDIT_FILE when set, and
this command's output.
`

// agentMembers is plug agent members: the operator changes the member
// store of the agent's platform directly.
func (c *cli) agentMembers(ctx context.Context, args []string) error {
	op := "list"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		op, args = args[0], args[1:]
	}
	fs := flags("agent")
	user := fs.String("user", "", "")
	yes := fs.Bool("yes", false, "")
	reason := fs.String("reason", "", "")
	pos, err := c.parse("agent", fs, args, true)
	if err != nil {
		return err
	}
	change := tunnel.MemberChange{Op: op, By: "the operator", Reason: *reason}
	switch {
	case op == "list" || op == "reset":
		if len(pos) > 0 {
			return usageError("agent", "agent members %s takes no argument", op)
		}
		if op == "reset" && !*yes {
			return usageError("agent", "agent members reset forgets every member: give --yes")
		}
	case op == "add":
		if len(pos) != 1 || *user == "" {
			return usageError("agent", "agent members add takes --user NAME and one public key, as plug pubkey prints it")
		}
		key, comment, _, _, err := ssh.ParseAuthorizedKey([]byte(pos[0]))
		if err != nil {
			return usageError("agent", "%q is not a public key (%v): give it as plug pubkey prints it, ssh-ed25519 AAAA... comment", tunnel.PeerText(pos[0]), err)
		}
		change.PublicKey, change.Comment, change.User = key, comment, *user
	case op == "accept" || op == "refuse" || op == "remove" || op == "admin" || op == "unadmin" || op == "deny" || op == "undeny":
		if len(pos) != 1 {
			return usageError("agent", "agent members %s takes one key fingerprint, SHA256:...", op)
		}
		if err := tunnel.CheckFingerprint(pos[0]); err != nil {
			return usageError("agent", "%v", err)
		}
		change.Key = pos[0]
	default:
		return usageError("agent", "agent members: %q is not list, add, accept, refuse, remove, admin, unadmin, deny, undeny or reset", op)
	}
	if *reason != "" && op != "remove" && op != "deny" {
		return usageError("agent", "--reason goes with remove and deny only")
	}
	logger := func(format string, args ...any) { fmt.Fprintf(c.stderr, "plug agent: "+format+"\n", args...) }
	platform, err := newPlatform(ctx, os.Getenv("PLUG_PLATFORM"), logger)
	if err != nil {
		return err
	}
	store, ok := platform.(tunnel.MemberStore)
	if !ok {
		return errors.New("this agent's platform keeps no members: admission by approval needs kubernetes or swarm")
	}
	if op == "list" {
		l, err := store.LoadMembers(ctx)
		if err != nil {
			return err
		}
		writeMembers(c.stdout, l, time.Now())
		return nil
	}
	before, _ := store.LoadMembers(ctx)
	if _, err := tunnel.Apply(ctx, store, change); err != nil {
		return fmt.Errorf("%v; nothing was changed", err)
	}
	e := tunnel.AuditMemberChange(change, before)
	if audit, err := c.operatorAuditSink("/proc/1"); err == nil {
		audit(e)
	} else {
		tunnel.AuditJSON(c.stdout)(e)
		fmt.Fprintf(c.stderr, "plug: the audit trail: %v\n", err)
	}
	fmt.Fprintf(c.stderr, "plug: %s: %s %s\n", op, e.Key, e.User)
	return nil
}
