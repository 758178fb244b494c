package gateway_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/gateway"
	"plug/tunnel/tunneltest"
)

// profiles is a gateway's own key store: each developer deposits keys on
// their profile; an administrator removes them.
type profiles struct {
	mu      sync.Mutex
	keys    map[string]string // fingerprint → account
	removed map[string]*tunnel.Revoked
}

func (p *profiles) deposit(account string, key ssh.PublicKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys[ssh.FingerprintSHA256(key)] = account
}

func (p *profiles) remove(key ssh.PublicKey, by string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fp := ssh.FingerprintSHA256(key)
	p.removed[fp] = &tunnel.Revoked{By: by, Reason: fmt.Sprintf("the key %s was removed from %s's profile", fp, p.keys[fp])}
	delete(p.keys, fp)
}

func (p *profiles) Admit(user string, key ssh.PublicKey, from net.Addr) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	fp := ssh.FingerprintSHA256(key)
	if r := p.removed[fp]; r != nil {
		return r
	}
	switch account, ok := p.keys[fp]; {
	case !ok:
		return errors.New("deposit this key on your profile: /profile/dev/key")
	case account != user:
		return fmt.Errorf("this key belongs to %s", account)
	}
	return nil
}

func (p *profiles) Oversees(string) bool { return false }

// switches are the gateway's two.
type switches struct {
	mu             sync.Mutex
	devMode, plugs bool
}

func (s *switches) set(devMode, plugs bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.devMode, s.plugs = devMode, plugs
}

func (s *switches) ClosedBy() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !s.devMode:
		return "Developer mode"
	case !s.plugs:
		return "Open the developer tunnel"
	}
	return ""
}

func signer(t *testing.T) ssh.Signer {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// A gateway embeds the tunnel with its own key store and switches: the
// status follows the switches; a deposited key gets in; removing it on the
// profile ends its run at once, with why, and gives its takeover back;
// turning a switch off ends every run naming the switch and closes the
// port; a gateway that cannot provision names says so.
func TestGatewayEmbedsTheTunnel(t *testing.T) {
	platform := tunneltest.NewPlatform()
	platform.AddWorkload("web:80", "127.0.0.1:1")
	store := &profiles{keys: map[string]string{}, removed: map[string]*tunnel.Revoked{}}
	sw := &switches{}
	audit := tunneltest.NewAudit()
	hostKey := signer(t)
	addr := freeAddr(t)
	var broken sync.Mutex
	cannot := ""
	tun := gateway.New(gateway.Config{
		Addr: addr, HostKey: hostKey, Keys: store, Switches: sw, Audit: audit.Sink,
		PublicAddr: func() string { return "gateway.example:22222" }, ID: "gateway-0", Logf: t.Logf,
		Platform: func(context.Context) (tunnel.Platform, error) {
			broken.Lock()
			defer broken.Unlock()
			if cannot != "" {
				return nil, errors.New(cannot)
			}
			return platform, nil
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tun.Run(ctx) }()
	defer func() { cancel(); <-done }()
	status := func(want string) {
		t.Helper()
		clustertest.Until(t, clustertest.Settle, "status "+want, func() bool { return tun.Status() == want })
	}

	status("closed by switch Developer mode")
	sw.set(true, false)
	tun.Changed()
	status("closed by switch Open the developer tunnel")
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Error("a closed tunnel accepts connections")
	}
	sw.set(true, true)
	tun.Changed()
	status("listening on " + addr)

	alice, bob := signer(t), signer(t)
	store.deposit("alice", alice.PublicKey())
	store.deposit("bob", bob.PublicKey())
	connect := func(user string, s ssh.Signer) *tunnel.Session {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		sess, err := tunnel.Connect(ctx, tunnel.ClientConfig{Addr: addr, User: user, Signer: s, HostKey: hostKey.PublicKey(), Run: tunnel.RunInfo{Serves: true}})
		if err != nil {
			t.Fatalf("%s connects: %v", user, err)
		}
		t.Cleanup(func() { sess.Close() })
		return sess
	}
	ended := func(s *tunnel.Session, what string) *tunnel.EndedError {
		t.Helper()
		select {
		case <-s.Done():
		case <-time.After(clustertest.Settle):
			t.Fatalf("%s: the run goes on", what)
		}
		var e *tunnel.EndedError
		if !errors.As(s.Err(), &e) {
			t.Fatalf("%s: %v", what, s.Err())
		}
		return e
	}

	a := connect("alice", alice)
	if _, err := a.Serve(ctx, "web", 80, "127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	store.remove(alice.PublicKey(), "admin@gateway (Application, Users)")
	tun.Changed()
	e := ended(a, "alice's key removed")
	if e.By != "admin@gateway (Application, Users)" || !strings.Contains(e.Reason, "removed from alice's profile") {
		t.Errorf("alice reads: %v", e)
	}
	clustertest.Until(t, clustertest.Settle, "web given back", func() bool { _, held := platform.Held("web"); return !held })
	if r := audit.Await(t, clustertest.Settle, "alice's run.ended", func(e tunnel.AuditEvent) bool {
		return e.Event == tunnel.AuditRunEnded && e.User == "alice"
	}); r.How != tunnel.EndKeyRemoved {
		t.Errorf("alice's run.ended: %+v", r)
	}

	b := connect("bob", bob)
	sw.set(true, false)
	tun.Changed()
	e = ended(b, "the tunnel switched off")
	if e.By != "switch Open the developer tunnel" || !strings.Contains(e.Reason, "Open the developer tunnel was turned off") {
		t.Errorf("bob reads: %v", e)
	}
	status("closed by switch Open the developer tunnel")
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Error("the tunnel still accepts connections after its switch was turned off")
	}

	broken.Lock()
	cannot = "the gateway does not run in a container: it cannot provision a name in the cluster"
	broken.Unlock()
	sw.set(true, true)
	tun.Changed()
	status("switched on but cannot run here: the gateway does not run in a container: it cannot provision a name in the cluster")
}
