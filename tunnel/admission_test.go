package tunnel_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/keys"
	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// offerOnly offers a public key it cannot sign with: what a stranger who
// knows somebody's public key can do.
type offerOnly struct{ key ssh.PublicKey }

func (o offerOnly) PublicKey() ssh.PublicKey { return o.key }
func (o offerOnly) Sign(io.Reader, []byte) (*ssh.Signature, error) {
	return nil, errors.New("no private key here")
}

// dialFrom connects to the agent at addr from the loopback address from,
// as user with signer, and returns the error of the handshake, with the
// banners the agent sent.
func dialFrom(ctx context.Context, from, addr, user string, signer ssh.Signer, hostKey ssh.PublicKey) error {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	var banners strings.Builder
	cc, chans, reqs, err := ssh.NewClientConn(c, addr, &ssh.ClientConfig{User: user, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: ssh.FixedHostKey(hostKey),
		BannerCallback: func(m string) error { banners.WriteString(m); return nil }})
	if err != nil {
		c.Close()
		return fmt.Errorf("%w; the agent said: %s", err, banners.String())
	}
	ssh.NewClient(cc, chans, reqs).Close()
	return nil
}

// With admission by approval, a key only offered (no signature) records no
// request, and is neither logged nor audited: dave's key offered by
// mallory does not become mallory's. 1,000 fresh keys from one address
// record a few requests and write a few lines, and another network is
// still heard.
func TestAdmissionRecordsOnlyProvenKeysAndBoundsWhatStrangersWrite(t *testing.T) {
	platform := tunneltest.NewPlatform()
	alice, _ := newKey(t)
	ctx := ctxFor(t, 120*time.Second)
	if _, err := tunnel.Apply(ctx, platform, tunnel.MemberChange{Op: "add", PublicKey: alice.PublicKey(), User: "alice", By: "the operator"}); err != nil {
		t.Fatal(err)
	}
	audit := tunneltest.NewAudit()
	var log lines
	addr, hostKey, _ := tunneltest.StartAgent(t, platform, func(a *tunnel.Agent) {
		a.Keys, a.Audit = tunnel.NewMembers(platform, true), audit.Sink
		a.Logf = func(format string, args ...any) { fmt.Fprintf(&log, format+"\n", args...) }
	})
	aliceCfg := tunnel.ClientConfig{Addr: addr, User: "alice", Signer: alice, HostKey: hostKey}
	clustertest.Until(t, clustertest.Settle, "alice let in", func() bool { _, _, err := tunnel.Who(ctx, aliceCfg); return err == nil })
	pending := func() []tunnel.Request {
		l, err := platform.LoadMembers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return l.Pending
	}

	dave, _ := newKey(t)
	daveFP := keys.Fingerprint(dave.PublicKey())
	if err := dialFrom(ctx, "127.0.0.1", addr, "mallory", offerOnly{dave.PublicKey()}, hostKey); err == nil {
		t.Fatal("a key offered without a signature was let in")
	}
	erin, _ := newKey(t)
	if err := dialFrom(ctx, "127.0.0.2", addr, "erin", erin, hostKey); err == nil || !strings.Contains(err.Error(), "ssh: unable to authenticate") {
		t.Fatalf("erin's proven key: %v", err)
	}
	clustertest.Until(t, clustertest.Settle, "erin's request pending", func() bool { return len(pending()) > 0 })
	if p := pending(); len(p) != 1 || p[0].Key != keys.Fingerprint(erin.PublicKey()) {
		t.Errorf("pending after dave's key was offered by mallory and erin proved hers: %+v, want erin's only", p)
	}
	for _, e := range audit.Events() {
		if e.Key == daveFP {
			t.Errorf("the offer of dave's key was audited: %+v", e)
		}
	}
	if log.has(daveFP) {
		t.Errorf("the offer of dave's key was logged:\n%s", log.String())
	}

	before := strings.Count(log.String(), "refused the key")
	auditedBefore := len(audit.Events(tunnel.AuditRunRefused))
	const strangers = 1000
	var recorded, notRecorded atomic.Int32
	start := time.Now()
	var wg sync.WaitGroup
	keysCh := make(chan ssh.Signer)
	for range 8 {
		wg.Go(func() {
			for k := range keysCh {
				err := dialFrom(ctx, "127.0.0.3", addr, "stranger", k, hostKey)
				switch {
				case err == nil:
					t.Error("a stranger's key was let in")
				case strings.Contains(err.Error(), "the request is recorded"):
					recorded.Add(1)
				case strings.Contains(err.Error(), "was not recorded"):
					notRecorded.Add(1)
				}
			}
		})
	}
	for range strangers {
		k, _ := newKey(t)
		keysCh <- k
	}
	close(keysCh)
	wg.Wait()
	took := time.Since(start)
	frank, _ := newKey(t)
	if err := dialFrom(ctx, "127.1.0.4", addr, "frank", frank, hostKey); err == nil || !strings.Contains(err.Error(), "ssh: unable to authenticate") {
		t.Fatalf("frank's key from another network: %v", err)
	}
	frankFP := keys.Fingerprint(frank.PublicKey())
	clustertest.Until(t, clustertest.Settle, "frank's request pending", func() bool {
		for _, r := range pending() {
			if r.Key == frankFP {
				return true
			}
		}
		return false
	})
	fromFlood := 0
	for _, r := range pending() {
		if r.User == "stranger" {
			fromFlood++
		}
	}
	logged := strings.Count(log.String(), "refused the key") - before
	audited := len(audit.Events(tunnel.AuditRunRefused)) - auditedBefore
	t.Logf("%d keys from one address in %s: %d told recorded, %d told not; %d pending, %d log lines, %d run.refused audit lines",
		strangers, took.Round(time.Millisecond), recorded.Load(), notRecorded.Load(), fromFlood, logged, audited)
	if fromFlood > 5 || recorded.Load() > 5 {
		t.Errorf("1,000 keys from one address left %d requests pending (%d told recorded), want at most 5", fromFlood, recorded.Load())
	}
	if int(recorded.Load()+notRecorded.Load()) != strangers {
		t.Errorf("%d of %d strangers read neither refusal", strangers-int(recorded.Load()+notRecorded.Load()), strangers)
	}
	// 10 at once, then one every 10 s, while the flood lasts.
	if bound := 10 + int(took.Seconds()/10) + 1; logged > bound || audited > bound {
		t.Errorf("1,000 keys from one address wrote %d log lines and %d audit lines, want at most %d", logged, audited, bound)
	}
}
