package tunnel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// Admission by approval: with it, only the keys a member accepted open
// runs. A key that is not a member is refused with its fingerprint and the
// command a member runs to accept it, and is recorded as a pending request
// (capped, and forgotten after PendingExpiry); a member accepts or refuses
// it, or removes a member, with plug members; a removed key's open runs end
// at once, on every replica, saying who removed it. Each key belongs to one
// account: the SSH user name it was accepted for. The members, the pending
// requests and the admins (who oversee the runs of others when admission is
// open) are one MemberList in the platform's MemberStore.
//
// The deny list, in the same MemberList, takes keys back whatever the
// admission: a denied key is refused at its next connection, and its open
// runs end on every replica as soon as each sees the list change, saying
// who denied it and why, until the operator or an admin lifts it.

// Caps of the member list.
const (
	MaxMembers    = 1000
	MaxPending    = 50
	MaxAdmins     = 100
	MaxDenied     = 1000
	PendingExpiry = 7 * 24 * time.Hour
	// requestRefresh is how often a pending request's Last is rewritten
	// while its key keeps trying.
	requestRefresh = time.Minute
)

// MemberList is what a MemberStore keeps.
type MemberList struct {
	Members []Member  `json:"members,omitempty"`
	Pending []Request `json:"pending,omitempty"`
	// Admins are fingerprints that see and end every run when admission
	// is open (with admission by approval every member does).
	Admins []string `json:"admins,omitempty"`
	// Removed are the members removed lately (PendingExpiry): every
	// replica tells their runs, and their next tries, who removed them and
	// why; a member may accept one again.
	Removed []Removal `json:"removed,omitempty"`
	// Denied are keys taken back whatever the admission, until lifted.
	Denied []Denial `json:"denied,omitempty"`
}

// Denial is a key denied, by whom and why.
type Denial struct {
	Key    string    `json:"key"` // fingerprint
	By     string    `json:"by"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// Removal is a member removed, by whom and why.
type Removal struct {
	Member
	RemovedBy string    `json:"removed_by"`
	Reason    string    `json:"reason,omitempty"`
	At        time.Time `json:"at"`
}

// Member is an accepted key.
type Member struct {
	Key       string    `json:"key"`        // fingerprint, "SHA256:..."
	PublicKey string    `json:"public_key"` // the key, as one authorized_keys line
	User      string    `json:"user"`       // the account it belongs to
	Comment   string    `json:"comment,omitempty"`
	By        string    `json:"by"` // who accepted it
	Since     time.Time `json:"since"`
}

// Request is a key that tried to open a run without being a member.
type Request struct {
	Key       string    `json:"key"`
	PublicKey string    `json:"public_key"`
	User      string    `json:"user"` // the account it asked for
	From      string    `json:"from"` // the address it came from, last time
	First     time.Time `json:"first"`
	Last      time.Time `json:"last"`
}

// member returns the member of fingerprint fp.
func (l *MemberList) member(fp string) (Member, bool) {
	i := slices.IndexFunc(l.Members, func(m Member) bool { return m.Key == fp })
	if i < 0 {
		return Member{}, false
	}
	return l.Members[i], true
}

// request returns the index of fp's pending request, or -1.
func (l *MemberList) request(fp string) int {
	return slices.IndexFunc(l.Pending, func(r Request) bool { return r.Key == fp })
}

// denial returns the index of fp's denial, or -1.
func (l *MemberList) denial(fp string) int {
	return slices.IndexFunc(l.Denied, func(d Denial) bool { return d.Key == fp })
}

// removal returns the index of fp's removal, or -1.
func (l *MemberList) removal(fp string) int {
	return slices.IndexFunc(l.Removed, func(r Removal) bool { return r.Key == fp })
}

// expire forgets the requests that stopped trying, and the removals made,
// PendingExpiry ago.
func (l *MemberList) expire(now time.Time) {
	l.Pending = slices.DeleteFunc(l.Pending, func(r Request) bool { return now.Sub(r.Last) > PendingExpiry })
	l.Removed = slices.DeleteFunc(l.Removed, func(r Removal) bool { return now.Sub(r.At) > PendingExpiry })
}

// Members is admission by approval, or open admission with admins: a Keys
// backed by a MemberStore. Run it (Watch) for as long as the agent serves.
type Members struct {
	store  MemberStore
	invite bool

	mu     sync.Mutex
	list   MemberList
	loaded bool
	err    error           // why the list could not be read, if it could not
	asking map[string]bool // keys whose request is being recorded
}

var (
	_ WatchedKeys = (*Members)(nil)
	_ Requester   = (*Members)(nil)
)

// NewMembers returns the admission of store: by approval when invite is
// set, else open (any key), with the admins the list names.
func NewMembers(store MemberStore, invite bool) *Members {
	return &Members{store: store, invite: invite, asking: map[string]bool{}}
}

// Invite reports whether admission is by approval.
func (m *Members) Invite() bool { return m.invite }

// NotMemberError is the refusal of a key that is not a member.
type NotMemberError struct {
	Key      string // fingerprint
	Recorded bool   // its request is pending, for a member to accept
	Full     bool   // too many requests are pending to record it
	Limited  bool   // too many new requests came lately, from its address or overall, to record it
}

func (e *NotMemberError) Error() string {
	switch {
	case e.Limited:
		return "this key is not a member of this cluster's plug, and too many new keys asked to be let in lately (from your address, or from everywhere), so its request was not recorded: try again in a few minutes"
	case e.Full:
		return fmt.Sprintf("this key is not a member of this cluster's plug, and %d requests are pending already, so it was not recorded: ask a member to accept or refuse them (plug members -p PROFILE lists them), then try again", MaxPending)
	default:
		return fmt.Sprintf("this key is not a member of this cluster's plug yet; the request is recorded. A member accepts it with:\n  plug members accept -p PROFILE %s\n(the first member is set by the cluster's operator: see deploy/README.md, Admission by approval). Then run again.", e.Key)
	}
}

// Admit lets in a member's key for its own account; see Keys. With open
// admission it lets in every key. It records nothing: the refusal of a key
// that is not a member says whether its request is pending already; the
// agent records it with Request once the key is proven.
func (m *Members) Admit(user string, key ssh.PublicKey, from net.Addr) error {
	fp := ssh.FingerprintSHA256(key)
	m.mu.Lock()
	defer m.mu.Unlock()
	if i := m.list.denial(fp); i >= 0 {
		d := m.list.Denied[i]
		why := fmt.Sprintf("this key was denied by %s", d.By)
		if d.Reason != "" {
			why += ": " + d.Reason
		}
		return &Revoked{By: d.By, Denied: true, Reason: fmt.Sprintf("%s. It is refused on every replica until the cluster's operator or an admin lifts the denial (plug members undeny %s): ask them", why, fp)}
	}
	if !m.invite {
		return nil
	}
	if !m.loaded {
		why := "they have not been read yet; try again in a moment"
		if m.err != nil {
			why = m.err.Error()
		}
		return fmt.Errorf("admission is by approval, and the agent cannot read its members (%s); the cluster's operator: see deploy/README.md, Admission by approval", why)
	}
	if mem, ok := m.list.member(fp); ok {
		if mem.User != user {
			return fmt.Errorf("this key belongs to the account %s, not %s: a key belongs to one account. Connect as %s (plug profile add ... --user %s --force), or use another key for %s", mem.User, PeerText(user), mem.User, mem.User, PeerText(user))
		}
		return nil
	}
	if i := m.list.removal(fp); i >= 0 {
		r := m.list.Removed[i]
		why := fmt.Sprintf("this key was removed from the members by %s", r.RemovedBy)
		if r.Reason != "" {
			why += ": " + r.Reason
		}
		return &Revoked{By: r.RemovedBy, Reason: fmt.Sprintf("%s. A member may accept it again: plug members accept -p PROFILE %s", why, fp)}
	}
	pending := m.list.request(fp) >= 0
	return &NotMemberError{Key: fp, Recorded: pending, Full: !pending && len(m.list.Pending) >= MaxPending}
}

// Request records key's request for the account user, from from, unless
// too many are pending; see Requester. The agent asks it only of a key
// whose holder proved it, so that nobody records a request for a key
// they do not hold.
func (m *Members) Request(user string, key ssh.PublicKey, from net.Addr) error {
	fp := ssh.FingerprintSHA256(key)
	m.mu.Lock()
	defer m.mu.Unlock()
	full := len(m.list.Pending) >= MaxPending && m.list.request(fp) < 0
	if full {
		countCap("pending_requests")
	} else {
		m.record(Request{Key: fp, PublicKey: authorizedLine(key), User: PeerText(user), From: addrString(from)})
	}
	return &NotMemberError{Key: fp, Recorded: !full, Full: full}
}

// record writes req as pending, in the background, unless its key's
// request is fresh already or being written.
func (m *Members) record(req Request) {
	if i := m.list.request(req.Key); i >= 0 && time.Since(m.list.Pending[i].Last) < requestRefresh {
		return
	}
	if m.asking[req.Key] {
		return
	}
	m.asking[req.Key] = true
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m.store.UpdateMembers(ctx, func(l *MemberList) error {
			now := time.Now().UTC()
			l.expire(now)
			if _, ok := l.member(req.Key); ok {
				return errUnchanged
			}
			req.Last = now
			if i := l.request(req.Key); i >= 0 {
				req.First = l.Pending[i].First
				l.Pending[i] = req
				return nil
			}
			if len(l.Pending) >= MaxPending {
				return errUnchanged
			}
			req.First = now
			l.Pending = append(l.Pending, req)
			return nil
		})
		m.mu.Lock()
		delete(m.asking, req.Key)
		m.mu.Unlock()
	}()
}

// errUnchanged makes UpdateMembers write nothing.
var errUnchanged = errors.New("nothing to change")

// Oversees reports whether fp sees and ends everyone's runs: every member
// with admission by approval, the admins with open admission.
func (m *Members) Oversees(fp string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.list.denial(fp) >= 0 {
		return false
	}
	if m.invite {
		_, ok := m.list.member(fp)
		return ok
	}
	return slices.Contains(m.list.Admins, fp)
}

// Vouches reports whether fp is a key someone vouched for: a member (the
// operator may add members with open admission too) or an admin, and not
// denied. The operator's narrowing of open admission (OpenRules) spares
// those keys.
func (m *Members) Vouches(fp string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.list.denial(fp) >= 0 {
		return false
	}
	_, member := m.list.member(fp)
	return member || slices.Contains(m.list.Admins, fp)
}

// Watch follows the store until ctx ends, calling changed after each
// change of the list, so that the agent ends the runs of removed keys.
func (m *Members) Watch(ctx context.Context, changed func()) error {
	err := m.store.WatchMembers(ctx, func(l MemberList) {
		m.mu.Lock()
		m.list, m.loaded, m.err = l, true, nil
		m.mu.Unlock()
		changed()
	})
	if ctx.Err() == nil {
		m.fail(err)
	}
	return err
}

// fail records why the list cannot be read, for Admit to say.
func (m *Members) fail(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.err = err
}

// List returns the member list as last read.
func (m *Members) List() MemberList {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.list
}

// MemberChange is one change of the member list, made by By.
type MemberChange struct {
	Op  string // "accept", "refuse", "remove", "add", "admin", "unadmin", "deny", "undeny", "reset"
	Key string // the fingerprint it concerns ("" for reset)
	// PublicKey, Comment and User are the key (Key is its fingerprint)
	// and account of an "add".
	PublicKey ssh.PublicKey
	Comment   string
	User      string
	By        string // who does it: a member's account and key, or "the operator"
	Reason    string // why, for a remove: the developer reads it
}

// Apply makes c in store: accept a pending request, refuse it, remove a
// member, add a key as a member (the operator's first member), grant or
// take back an admin, deny a key or lift its denial, or reset the whole
// list. It refuses, changing nothing, a change that makes no sense: an
// unknown fingerprint, a key that is not pending or not a member, a key
// that belongs to another account, removing the last member, denying a
// key twice, more than the caps.
func Apply(ctx context.Context, store MemberStore, c MemberChange) (MemberList, error) {
	if c.PublicKey != nil {
		c.Key = ssh.FingerprintSHA256(c.PublicKey)
	}
	if c.Op != "reset" {
		if err := CheckFingerprint(c.Key); err != nil {
			return MemberList{}, err
		}
	}
	return store.UpdateMembers(ctx, func(l *MemberList) error {
		now := time.Now().UTC()
		l.expire(now)
		return applyTo(l, c, now)
	})
}

func applyTo(l *MemberList, c MemberChange, now time.Time) error {
	_, isMember := l.member(c.Key)
	req := l.request(c.Key)
	switch c.Op {
	case "accept":
		removed := l.removal(c.Key)
		switch {
		case isMember:
			return fmt.Errorf("%s is a member already", c.Key)
		case req < 0 && removed < 0:
			return fmt.Errorf("%s has no pending request: the developer runs plug doctor -p PROFILE once with that key (it is refused, and its request recorded), then accept it; plug members -p PROFILE lists the pending requests", c.Key)
		case len(l.Members) >= MaxMembers:
			return fmt.Errorf("there are %d members, as many as plug keeps: remove one first", MaxMembers)
		}
		var m Member
		if req >= 0 {
			r := l.Pending[req]
			l.Pending = slices.Delete(l.Pending, req, req+1)
			m = Member{Key: r.Key, PublicKey: r.PublicKey, User: r.User}
		} else {
			m = l.Removed[removed].Member
		}
		if removed >= 0 {
			l.Removed = slices.Delete(l.Removed, removed, removed+1)
		}
		m.By, m.Since = c.By, now
		l.Members = append(l.Members, m)
	case "refuse":
		if req < 0 {
			return fmt.Errorf("%s has no pending request (plug members -p PROFILE lists them)", c.Key)
		}
		l.Pending = slices.Delete(l.Pending, req, req+1)
	case "remove":
		switch {
		case !isMember:
			return fmt.Errorf("%s is not a member (plug members -p PROFILE lists them)", c.Key)
		case len(l.Members) == 1:
			return fmt.Errorf("%s is the last member: nobody could accept a key after it. To start over, the cluster's operator resets the members (deploy/README.md, Admission by approval)", c.Key)
		}
		gone, _ := l.member(c.Key)
		l.Members = slices.DeleteFunc(l.Members, func(m Member) bool { return m.Key == c.Key })
		l.Removed = append(slices.DeleteFunc(l.Removed, func(r Removal) bool { return r.Key == c.Key }),
			Removal{Member: gone, RemovedBy: c.By, Reason: PeerText(c.Reason), At: now})
		if len(l.Removed) > MaxPending {
			l.Removed = l.Removed[len(l.Removed)-MaxPending:]
		}
	case "add":
		if err := checkAdd(l, c); err != nil {
			return err
		}
		if req >= 0 {
			l.Pending = slices.Delete(l.Pending, req, req+1)
		}
		l.Removed = slices.DeleteFunc(l.Removed, func(r Removal) bool { return r.Key == c.Key })
		l.Members = append(l.Members, Member{Key: c.Key, PublicKey: authorizedLine(c.PublicKey), User: c.User, Comment: PeerText(c.Comment), By: c.By, Since: now})
	case "admin":
		switch {
		case slices.Contains(l.Admins, c.Key):
			return fmt.Errorf("%s is an admin already", c.Key)
		case len(l.Admins) >= MaxAdmins:
			return fmt.Errorf("there are %d admins, as many as plug keeps", MaxAdmins)
		}
		l.Admins = append(l.Admins, c.Key)
	case "unadmin":
		if !slices.Contains(l.Admins, c.Key) {
			return fmt.Errorf("%s is not an admin", c.Key)
		}
		l.Admins = slices.DeleteFunc(l.Admins, func(k string) bool { return k == c.Key })
	case "deny":
		switch {
		case l.denial(c.Key) >= 0:
			return fmt.Errorf("%s is denied already (plug members -p PROFILE lists the denied keys)", c.Key)
		case len(l.Denied) >= MaxDenied:
			return fmt.Errorf("%d keys are denied, as many as plug keeps: lift one first (undeny), or turn admission by approval on (PLUG_ADMISSION=invite)", MaxDenied)
		}
		l.Denied = append(l.Denied, Denial{Key: c.Key, By: c.By, Reason: PeerText(c.Reason), At: now})
	case "undeny":
		i := l.denial(c.Key)
		if i < 0 {
			return fmt.Errorf("%s is not denied (plug members -p PROFILE lists the denied keys)", c.Key)
		}
		l.Denied = slices.Delete(l.Denied, i, i+1)
	case "reset":
		*l = MemberList{Denied: l.Denied} // a reset starts admission over; it lifts no denial
	default:
		return fmt.Errorf("%q is not a change of the members: accept, refuse, remove, add, admin, unadmin, deny, undeny or reset", c.Op)
	}
	return nil
}

// checkAdd refuses adding a key that is a member already (of this account
// or another: a key belongs to one account), or an account name no SSH
// client could send.
func checkAdd(l *MemberList, c MemberChange) error {
	if m, ok := l.member(c.Key); ok {
		if m.User != c.User {
			return fmt.Errorf("%s belongs to the account %s already: a key belongs to one account; the developer uses another key for %s", c.Key, m.User, c.User)
		}
		return fmt.Errorf("%s is a member already, for %s", c.Key, m.User)
	}
	if c.User == "" || c.User == "get" || c.User != PeerText(c.User) || strings.ContainsAny(c.User, " \t") {
		return fmt.Errorf("the account %q is not a user name a developer connects as (the user of their profile, e.g. alice)", c.User)
	}
	if len(l.Members) >= MaxMembers {
		return fmt.Errorf("there are %d members, as many as plug keeps: remove one first", MaxMembers)
	}
	return nil
}

// CheckFingerprint accepts a key's SHA256 fingerprint as ssh-keygen -l and
// plug print it: "SHA256:" and 43 characters of unpadded base64.
func CheckFingerprint(fp string) error {
	b64, ok := strings.CutPrefix(fp, "SHA256:")
	if !ok || len(b64) != 43 || strings.Trim(b64, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") != "" {
		return fmt.Errorf("%q is not a key's fingerprint: give it as plug pubkey and the refusal print it, SHA256: and 43 characters (e.g. SHA256:Qj5VdDZl6PqCj9Zc3LZR4Gki/jHJ+oCzt97rkKPX2tU)", PeerText(fp))
	}
	return nil
}

// authorizedLine is key as an authorized_keys line, without comment.
func authorizedLine(key ssh.PublicKey) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
