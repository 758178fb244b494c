package tunnel

import (
	"context"
	"errors"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// Keys decides who may open runs on an agent, and who may see and end the
// runs of other developers: plug's own members (admission by approval,
// members.go), or the key store of a gateway that embeds the agent, where
// developers deposit their keys on their profile.
type Keys interface {
	// Admit returns nil when key may open runs as user, connecting from
	// from; else an error whose text the developer reads, saying what to
	// do. The agent asks at each authentication, once the developer has
	// proven the key with a signature, and again of every open run after
	// Recheck: a run whose key is no longer admitted ends, and its
	// developer reads the refusal (a *Revoked says who took it back).
	// Admit records nothing (a Requester's Request does).
	Admit(user string, key ssh.PublicKey, from net.Addr) error
	// Oversees reports whether the holder of the key with this fingerprint
	// ("SHA256:...") sees every developer's runs in plug who and may end
	// any of them with plug end; the others see and end their own only.
	Oversees(fingerprint string) bool
}

// WatchedKeys is a Keys that knows when keys are taken back. The agent runs
// Watch for as long as it serves; Watch calls changed whenever an admitted
// key may have been taken back, and the agent then asks Admit again about
// every open run (Recheck). Members is one.
type WatchedKeys interface {
	Keys
	Watch(ctx context.Context, changed func()) error
}

// Revoked is Admit's refusal of a key that was let in before: By (a
// member's account and key, or the screen of a gateway) took it back. The
// runs the key has open end, with By and Reason in the developer's
// terminal.
type Revoked struct {
	By     string
	Reason string
	Denied bool // the key is on the deny list (members.go)
}

func (e *Revoked) Error() string { return e.Reason }

// Recheck asks Keys again about the key of every open run, and ends at
// once, giving its names back, each run whose key is no longer admitted.
// Call it whenever keys may have been taken back; for a WatchedKeys the
// agent calls it itself.
func (a *Agent) Recheck() {
	if a.Keys == nil {
		return
	}
	a.mu.Lock()
	runs := slices.Collect(maps.Values(a.runs))
	a.mu.Unlock()
	for _, r := range runs {
		err := a.Keys.Admit(r.user, r.key, r.remoteAddr())
		if err == nil {
			continue
		}
		e := ending{how: EndKeyRemoved, by: "admission", reason: err.Error()}
		var revoked *Revoked
		if errors.As(err, &revoked) {
			e.by, e.reason = revoked.By, revoked.Reason
		}
		go a.endRun(r, e)
	}
}

// oversees reports whether the developer on dc sees and ends every run.
func (a *Agent) oversees(dc *devConn) bool {
	return a.Keys != nil && a.Keys.Oversees(dc.fingerprint)
}

// watchKeys runs a WatchedKeys' Watch until ctx ends, rechecking the runs
// at each change.
func (a *Agent) watchKeys(ctx context.Context) {
	wk, ok := a.Keys.(WatchedKeys)
	if !ok {
		return
	}
	if err := wk.Watch(ctx, a.Recheck); ctx.Err() == nil {
		a.logf("not following the keys admitted (%v): a key taken back does not end its runs at once, and with admission by approval keys may be refused", err)
	}
}

// refusalAuditEvery is how often the refusal of one key is audited while it
// keeps trying; maxRefusalsKept bounds the keys remembered for it.
const (
	refusalAuditEvery = time.Minute
	maxRefusalsKept   = 4096
)

// refusals remembers when each refused key was last audited.
type refusals struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// auditRefused writes run.refused for a key Keys refused (and key.requested
// when its request was recorded), at most once a minute per key.
func (a *Agent) auditRefused(fp, user string, from net.Addr, err error) {
	a.refused.mu.Lock()
	if a.refused.last == nil || len(a.refused.last) >= maxRefusalsKept {
		a.refused.last = map[string]time.Time{}
	}
	if time.Since(a.refused.last[fp]) < refusalAuditEvery {
		a.refused.mu.Unlock()
		return
	}
	a.refused.last[fp] = time.Now()
	a.refused.mu.Unlock()
	var revoked *Revoked
	if errors.As(err, &revoked) && revoked.Denied {
		countRefusal("denied")
	} else {
		countRefusal("admission")
	}
	e := AuditEvent{Event: AuditRunRefused, User: PeerText(user), Key: fp, From: addrString(from), Reason: err.Error()}
	a.audit(e)
	var nm *NotMemberError
	if errors.As(err, &nm) && nm.Recorded {
		a.audit(AuditEvent{Event: AuditKeyRequest, User: e.User, Key: e.Key, From: e.From})
	}
}
