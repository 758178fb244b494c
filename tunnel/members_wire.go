package tunnel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/crypto/ssh"
)

// plug members is a question on the control channel, asked without a
// hello as who is (who.go): the CLI sends a members message with Op
// ("list", "accept", "refuse", "remove", "deny" or "undeny") and, but for list, Key (a
// fingerprint) and maybe Reason; the agent answers with a members message
// holding the list (after the change), Done saying what changed, or Error.
const typeMembers = "members"

type membersMsg struct {
	Op     string      `json:"op,omitempty"`
	Key    string      `json:"key,omitempty"`
	Reason string      `json:"reason,omitempty"`
	List   *MemberList `json:"list,omitempty"`
	More   bool        `json:"more,omitempty"` // a part of the list; more parts follow
	Done   string      `json:"done,omitempty"`
	Error  string      `json:"error,omitempty"`
}

func (m *membersMsg) check() error {
	if err := checkFields("members", []*string{&m.Op, &m.Key}, []*string{&m.Reason, &m.Done, &m.Error}); err != nil {
		return err
	}
	l := m.List
	if l == nil {
		return nil
	}
	if l.tooLong() {
		return errors.New("members: a longer list than plug keeps")
	}
	var fields []*string
	for i := range l.Members {
		mm := &l.Members[i]
		fields = append(fields, &mm.Key, &mm.User, &mm.Comment, &mm.By)
	}
	for i := range l.Pending {
		r := &l.Pending[i]
		fields = append(fields, &r.Key, &r.User, &r.From)
	}
	for i := range l.Removed {
		r := &l.Removed[i]
		fields = append(fields, &r.Key, &r.User, &r.RemovedBy, &r.Reason)
	}
	for i := range l.Denied {
		d := &l.Denied[i]
		fields = append(fields, &d.Key, &d.By, &d.Reason)
	}
	return checkFields("members", fields, nil)
}

// tooLong reports whether l holds more than plug keeps.
func (l *MemberList) tooLong() bool {
	return len(l.Members) > MaxMembers || len(l.Pending) > MaxPending || len(l.Admins) > MaxAdmins ||
		len(l.Removed) > MaxPending || len(l.Denied) > MaxDenied
}

// ManageMembers asks the agent at cfg.Addr to list the members (op
// "list") or to accept, refuse, remove, deny or undeny the key with
// fingerprint key, for reason (told to a removed or denied key's runs).
// It returns the list after the change and what was done. It connects as
// Connect would, with the same errors, and opens no run.
func ManageMembers(ctx context.Context, cfg ClientConfig, op, key, reason string) (MemberList, string, error) {
	switch op {
	case "list":
	case "accept", "refuse", "remove", "deny", "undeny":
		if err := CheckFingerprint(key); err != nil {
			return MemberList{}, "", err
		}
	default:
		return MemberList{}, "", fmt.Errorf("%q is not list, accept, refuse, remove, deny or undeny", op)
	}
	q, err := openAgent(ctx, cfg)
	if err != nil {
		return MemberList{}, "", err
	}
	defer q.close()
	var l MemberList
	var done string
	err = askDecoded(q, membersMsg{Op: op, Key: key, Reason: reason}, typeMembers, whoWait, decodeMsg[membersMsg], func(m membersMsg) (bool, error) {
		if m.Error != "" {
			return false, errors.New(m.Error)
		}
		if m.List != nil {
			l.Members = append(l.Members, m.List.Members...)
			l.Pending = append(l.Pending, m.List.Pending...)
			l.Admins = append(l.Admins, m.List.Admins...)
			l.Removed = append(l.Removed, m.List.Removed...)
			l.Denied = append(l.Denied, m.List.Denied...)
		}
		if l.tooLong() {
			return false, fmt.Errorf("the agent at %s lists more than plug keeps", cfg.Addr)
		}
		done = m.Done
		return m.More, nil
	})
	return l, done, err
}

// answerMembers answers plug members: with admission by approval every
// member lists and changes the members and the deny list; with open
// admission the admins list them and deny keys or lift denials. The
// change is audited.
func (dc *devConn) answerMembers(q membersMsg) {
	a := dc.a
	refuse := func(format string, args ...any) { dc.sendControl(membersMsg{Error: fmt.Sprintf(format, args...)}) }
	m, ok := a.Keys.(*Members)
	denial := q.Op == "deny" || q.Op == "undeny"
	switch {
	case !ok:
		refuse("this agent's keys are not plug's members: whoever runs it decides who gets in")
		return
	case !m.Invite() && !m.Oversees(dc.fingerprint):
		refuse("admission is open on this agent (any key that reaches it gets in): only the admins the cluster's operator named list the members and deny keys (deploy/README.md, Who may do what)")
		return
	case !m.Oversees(dc.fingerprint):
		refuse("only members manage the members")
		return
	case !m.Invite() && !denial && q.Op != "list":
		refuse("admission is open on this agent: there are no members to %s, only keys to deny (plug members deny). The cluster's operator turns admission by approval on with PLUG_ADMISSION=invite (deploy/README.md)", PeerText(q.Op))
		return
	case q.Op == "deny" && q.Key == dc.fingerprint:
		refuse("%s is the key you are asking with: denying it would lock you out; ask another admin or the cluster's operator", q.Key)
		return
	}
	ctx, cancel := a.platformContext()
	defer cancel()
	if q.Op == "list" {
		dc.sendList(m.List(), "")
		return
	}
	if q.Op != "accept" && q.Op != "refuse" && q.Op != "remove" && !denial {
		refuse("%q is not list, accept, refuse, remove, deny or undeny", PeerText(q.Op))
		return
	}
	change := MemberChange{Op: q.Op, Key: q.Key, By: fmt.Sprintf("%s (%s)", dc.user, dc.fingerprint), Reason: q.Reason}
	before := m.List()
	l, err := Apply(ctx, m.store, change)
	if err != nil {
		refuse("%v; nothing was changed", err)
		return
	}
	e := AuditMemberChange(change, before)
	a.audit(e)
	dc.sendList(l, memberDone(e))
}

// memberDone says what a change of the members did.
func memberDone(e AuditEvent) string {
	switch e.Event {
	case AuditKeyAccepted:
		return fmt.Sprintf("accepted %s for %s: its next run gets in", e.Key, e.User)
	case AuditKeyRefused:
		return fmt.Sprintf("refused the request of %s (%s); it may ask again", e.Key, e.User)
	case AuditKeyDenied:
		return fmt.Sprintf("denied %s: what it has open ends now, on every replica, and it is refused until undeny", e.Key)
	case AuditKeyUndenied:
		return fmt.Sprintf("lifted the denial of %s: its next connection gets in as admission allows", e.Key)
	}
	return fmt.Sprintf("removed %s (%s): what it has open ends now, on every replica", e.Key, e.User)
}

// AuditMemberChange is the audit event of change c, made to the list that
// was before.
func AuditMemberChange(c MemberChange, before MemberList) AuditEvent {
	if c.PublicKey != nil {
		c.Key = ssh.FingerprintSHA256(c.PublicKey)
	}
	e := AuditEvent{Time: time.Now().UTC(), Key: c.Key, User: c.User, By: c.By, Reason: PeerText(c.Reason)}
	if i := before.request(c.Key); i >= 0 {
		e.User = before.Pending[i].User
	} else if mem, ok := before.member(c.Key); ok {
		e.User = mem.User
	} else if i := before.removal(c.Key); i >= 0 {
		e.User = before.Removed[i].User
	}
	e.Event = map[string]string{
		"accept": AuditKeyAccepted, "add": AuditKeyAccepted, "refuse": AuditKeyRefused, "remove": AuditKeyRemoved,
		"admin": AuditKeyAdmin, "unadmin": AuditKeyUnadmin, "reset": AuditMembersReset,
		"deny": AuditKeyDenied, "undeny": AuditKeyUndenied,
	}[c.Op]
	return e
}

// sendList sends l, and done, in as many members messages as their size
// needs.
func (dc *devConn) sendList(l MemberList, done string) {
	var parts []MemberList
	part, size := MemberList{}, 0
	add := func(item any, put func(*MemberList)) {
		n := jsonSize(item)
		if size > 0 && size+n > partBudget {
			parts, part, size = append(parts, part), MemberList{}, 0
		}
		put(&part)
		size += n
	}
	for _, x := range l.Members {
		add(x, func(p *MemberList) { p.Members = append(p.Members, x) })
	}
	for _, x := range l.Pending {
		add(x, func(p *MemberList) { p.Pending = append(p.Pending, x) })
	}
	for _, x := range l.Removed {
		add(x, func(p *MemberList) { p.Removed = append(p.Removed, x) })
	}
	for _, x := range l.Admins {
		add(x, func(p *MemberList) { p.Admins = append(p.Admins, x) })
	}
	for _, x := range l.Denied {
		add(x, func(p *MemberList) { p.Denied = append(p.Denied, x) })
	}
	parts = append(parts, part)
	for i := range parts {
		last := i == len(parts)-1
		m := membersMsg{List: &parts[i], More: !last}
		if last {
			m.Done = done
		}
		dc.sendControl(m)
	}
}
