package tunnel_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// A session serves a name that carries the cluster's callers to a local
// process, reaches cluster names, and gives every name back at once on
// Close.
func TestSessionServesDialsAndSaysGoodbye(t *testing.T) {
	platform := tunneltest.NewPlatform()
	platform.AddWorkload("db:5432", echoServer(t, "db says "))
	platform.AddWorkload("api:8080", echoServer(t, "deployed api says "))
	platform.SetNames(tunnel.ClusterName{Name: "db", Ports: []int{5432}}, tunnel.ClusterName{Name: "api", Ports: []int{8080}})
	addr, hostKey, _ := tunneltest.StartAgent(t, platform)
	signer, _ := newKey(t)
	s, _ := connect(t, addr, hostKey, signer, tunnel.RunInfo{ID: "run-1", Serves: true})
	ctx := ctxFor(t, 20*time.Second)

	served, err := s.Serve(ctx, "web", 80, echoServer(t, "laptop says "))
	if err != nil || served.TookOver || served.Detail != "web is new in the cluster" {
		t.Fatalf("Serve web: %+v, %v", served, err)
	}
	expectEcho(t, platformDial(platform, "web:80"), "laptop says ")

	served, err = s.Serve(ctx, "api", 8080, echoServer(t, "local api says "))
	if err != nil || !served.TookOver {
		t.Fatalf("Serve api over the deployed one: %+v, %v", served, err)
	}
	if _, err := s.Serve(ctx, "web", 81, "localhost:1"); err == nil {
		t.Error("a second Serve of web was accepted")
	}

	expectEcho(t, func() (net.Conn, error) { return s.Dial(ctx, "db:5432") }, "db says ")
	_, err = s.Dial(ctx, "nothing:1")
	var dialErr *tunnel.DialError
	if !errors.As(err, &dialErr) || !strings.Contains(err.Error(), "not one of the cluster's names") {
		t.Errorf("Dial of an unknown name: %v", err)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"web", "api"} {
		if _, held := platform.Held(name); held {
			t.Errorf("%s still served right after Close", name)
		}
	}
	select {
	case <-s.Done():
	default:
		t.Error("Done not closed after Close")
	}
	if s.Err() != nil {
		t.Errorf("Err after Close: %v", s.Err())
	}
}

// When the TCP connection is killed, the session reconnects, the run keeps
// its name without a second takeover, and traffic flows again.
func TestSessionReconnectKeepsTheRunsNames(t *testing.T) {
	platform := tunneltest.NewPlatform()
	addr, hostKey, _ := tunneltest.StartAgent(t, platform)
	proxy := tunneltest.NewProxy(t, addr)
	signer, _ := newKey(t)
	s, events := connect(t, proxy.Addr(), hostKey, signer, tunnel.RunInfo{ID: "run-2", Serves: true})
	if _, err := s.Serve(ctxFor(t, 20*time.Second), "web", 80, echoServer(t, "laptop says ")); err != nil {
		t.Fatal(err)
	}
	expectEcho(t, platformDial(platform, "web:80"), "laptop says ")

	proxy.Cut()
	clustertest.Until(t, clustertest.Settle, "the session to say it reconnected", func() bool {
		return events.has("connection to the agent at "+proxy.Addr()+" lost, reconnecting") &&
			events.has("reconnected; web:80 kept")
	})
	expectEcho(t, platformDial(platform, "web:80"), "laptop says ")
	if serves, releases := platform.Count("serve", "web"), platform.Count("release", "web"); serves != 1 || releases != 0 {
		t.Errorf("the platform served web %d times and released it %d times, want 1 and 0", serves, releases)
	}
}

// A run whose connection is gone for longer than the grace gives its names
// back.
func TestGraceExpiryGivesNamesBack(t *testing.T) {
	platform := tunneltest.NewPlatform()
	addr, hostKey, _ := tunneltest.StartAgent(t, platform, func(a *tunnel.Agent) { a.Grace = 300 * time.Millisecond })
	proxy := tunneltest.NewProxy(t, addr)
	signer, _ := newKey(t)
	s, events := connect(t, proxy.Addr(), hostKey, signer, tunnel.RunInfo{ID: "run-3", Serves: true})
	if _, err := s.Serve(ctxFor(t, 20*time.Second), "web", 80, "localhost:1"); err != nil {
		t.Fatal(err)
	}
	proxy.Close()
	clustertest.Until(t, clustertest.Settle, "web to be given back after the grace", func() bool {
		_, held := platform.Held("web")
		return !held
	})
	clustertest.Until(t, clustertest.Settle, "the session to report it cannot reconnect", func() bool {
		return events.has("still reconnecting: connection refused")
	})
	select {
	case <-s.Done():
		t.Error("the session ended; it should keep reconnecting until Close")
	default:
	}
}

// Silence on the network is noticed by keepalives on both sides.
func TestKeepAliveNoticesADeadPeer(t *testing.T) {
	platform := tunneltest.NewPlatform()
	addr, hostKey, _ := tunneltest.StartAgent(t, platform, func(a *tunnel.Agent) {
		a.KeepAlive = 100 * time.Millisecond
		a.Grace = 100 * time.Millisecond
	})
	proxy := tunneltest.NewProxy(t, addr)
	signer, _ := newKey(t)
	s, events := connect(t, proxy.Addr(), hostKey, signer, tunnel.RunInfo{ID: "run-4", Serves: true},
		func(c *tunnel.ClientConfig) { c.KeepAlive = 100 * time.Millisecond })
	if _, err := s.Serve(ctxFor(t, 20*time.Second), "web", 80, "localhost:1"); err != nil {
		t.Fatal(err)
	}
	proxy.Freeze()
	clustertest.Until(t, clustertest.Settle, "the client to notice", func() bool { return events.has("lost, reconnecting") })
	clustertest.Until(t, clustertest.Settle, "the agent to notice and give web back", func() bool {
		_, held := platform.Held("web")
		return !held
	})
	proxy.Close() // Close's goodbye is refused at once, rather than lost in the silence
}

// A name another run holds is refused, saying who holds it (user, key,
// since) but not the run id; the session goes on.
func TestHeldNameIsRefusedWithItsHolder(t *testing.T) {
	platform := tunneltest.NewPlatform()
	platform.Hold("web", 80, tunnel.Holder{Run: "other-run", User: "alice", Developer: "SHA256:alice", Agent: "agent-1"})
	addr, hostKey, _ := tunneltest.StartAgent(t, platform)
	signer, _ := newKey(t)
	s, _ := connect(t, addr, hostKey, signer, tunnel.RunInfo{ID: "run-5", Serves: true})
	ctx := ctxFor(t, 20*time.Second)

	_, err := s.Serve(ctx, "web", 80, "localhost:1")
	var refused *tunnel.ServeError
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "already served by alice (key SHA256:alice) since") {
		t.Fatalf("Serve of a held name: %v", err)
	}
	if strings.Contains(err.Error(), "other-run") {
		t.Errorf("the refusal tells the holder's run id: %v", err)
	}
	if _, err := s.Serve(ctx, "api", 80, "localhost:1"); err != nil {
		t.Errorf("Serve after a refusal: %v", err)
	}
}

// An agent that shuts down gives back, before it stops, every name of a
// run that does not move to another agent (here there is none), and the
// session keeps trying to reconnect.
func TestAgentShutdownGivesNamesBack(t *testing.T) {
	platform := tunneltest.NewPlatform()
	addr, hostKey, stop := tunneltest.StartAgent(t, platform, func(a *tunnel.Agent) { a.MoveWait = 500 * time.Millisecond })
	signer, _ := newKey(t)
	s, events := connect(t, addr, hostKey, signer, tunnel.RunInfo{ID: "run-6", Serves: true})
	if _, err := s.Serve(ctxFor(t, 20*time.Second), "web", 80, "localhost:1"); err != nil {
		t.Fatal(err)
	}
	stop()
	if _, held := platform.Held("web"); held {
		t.Error("web still served after the agent stopped")
	}
	clustertest.Until(t, clustertest.Settle, "the session to say the agent is going", func() bool {
		return events.has("the agent is shutting down (agent); reconnecting")
	})
	select {
	case <-s.Done():
		t.Errorf("the session ended: %v", s.Err())
	default:
	}
}

// A run ended on the agent ends the session, saying by whom and why.
func TestEndedRunEndsTheSession(t *testing.T) {
	platform := tunneltest.NewPlatform()
	var agent *tunnel.Agent
	addr, hostKey, _ := tunneltest.StartAgent(t, platform, func(a *tunnel.Agent) { agent = a })
	signer, _ := newKey(t)
	s, events := connect(t, addr, hostKey, signer, tunnel.RunInfo{ID: "run-7", Serves: true})
	if _, err := s.Serve(ctxFor(t, 20*time.Second), "web", 80, "localhost:1"); err != nil {
		t.Fatal(err)
	}
	if err := agent.EndRun("run-7", "alice", "the cluster is being upgraded"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(clustertest.Settle):
		t.Fatal("the session did not end")
	}
	var ended *tunnel.EndedError
	if !errors.As(s.Err(), &ended) || ended.By != "alice" || ended.Reason != "the cluster is being upgraded" {
		t.Errorf("Err: %v", s.Err())
	}
	if !events.has("ended by alice: the cluster is being upgraded") {
		t.Errorf("events do not say it ended:\n%s", events)
	}
	if _, held := platform.Held("web"); held {
		t.Error("web still served after its run ended")
	}
}

// A run id belongs to the key that opened it.
func TestRunOfAnotherKeyIsRefused(t *testing.T) {
	addr, hostKey, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform())
	first, _ := newKey(t)
	connect(t, addr, hostKey, first, tunnel.RunInfo{ID: "shared"})
	second, _ := newKey(t)
	_, err := tunnel.Connect(ctxFor(t, 20*time.Second), tunnel.ClientConfig{
		Addr: addr, User: "dev", Signer: second, HostKey: hostKey, Run: tunnel.RunInfo{ID: "shared"},
	})
	var ended *tunnel.EndedError
	if !errors.As(err, &ended) || !strings.Contains(err.Error(), "belongs to another key") {
		t.Errorf("Connect with another key's run id: %v", err)
	}
}

// A host key other than the pinned one is refused, with both fingerprints
// and how to re-pin.
func TestWrongHostKeyIsRefused(t *testing.T) {
	addr, hostKey, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform())
	signer, _ := newKey(t)
	other, _ := newKey(t)
	_, err := tunnel.Connect(ctxFor(t, 20*time.Second), tunnel.ClientConfig{
		Addr: addr, User: "dev", Signer: signer, HostKey: other.PublicKey(), Profile: "prod",
	})
	var hk *tunnel.HostKeyError
	if !errors.As(err, &hk) || hk.Pinned != ssh.FingerprintSHA256(other.PublicKey()) || hk.Offered != ssh.FingerprintSHA256(hostKey) {
		t.Fatalf("Connect with the wrong pinned key: %v", err)
	}
	presented := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(hostKey)))
	_, port, _ := net.SplitHostPort(addr)
	for _, want := range []string{
		"plug agent host-key rotate",
		"Only if it is " + ssh.FingerprintSHA256(hostKey) + ", pin the key it presented",
		"plug profile add prod --host 127.0.0.1 --port " + port + " --host-key '" + presented + "' --force",
		"install | sh -s -- --fingerprint " + ssh.FingerprintSHA256(hostKey) + " 127.0.0.1 " + port,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
}

// A key the agent does not admit is refused, with its fingerprint, what the
// agent said, and where to take the key.
func TestRefusedKeyIsAnAuthError(t *testing.T) {
	addr, hostKey, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform(), func(a *tunnel.Agent) {
		a.Keys = tunneltest.RefuseKeys("not accepted yet: ask a member of the cluster")
	})
	signer, _ := newKey(t)
	_, err := tunnel.Connect(ctxFor(t, 20*time.Second), tunnel.ClientConfig{
		Addr: addr, User: "dev", Signer: signer, HostKey: hostKey, Profile: "prod",
	})
	var auth *tunnel.AuthError
	if !errors.As(err, &auth) || auth.Fingerprint != ssh.FingerprintSHA256(signer.PublicKey()) {
		t.Fatalf("Connect with a refused key: %v", err)
	}
	for _, want := range []string{"not accepted yet: ask a member", "plug pubkey -p prod"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
}

// An agent that cannot be reached is reported with the reason and how
// agents are usually reached.
func TestUnreachableAgent(t *testing.T) {
	signer, _ := newKey(t)
	cfg := tunnel.ClientConfig{Addr: "127.0.0.1:" + itoa(freePort(t)), User: "dev", Signer: signer, HostKey: signer.PublicKey()}
	_, err := tunnel.Connect(ctxFor(t, 20*time.Second), cfg)
	var unreachable *tunnel.UnreachableError
	if !errors.As(err, &unreachable) || unreachable.Reason != "connection refused" {
		t.Fatalf("Connect to a closed port: %v", err)
	}
	for _, want := range []string{"NodePort 32222", "port-forward svc/plug 2222:2222"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not mention %q:\n%v", want, err)
		}
	}

	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	cfg.Addr = silent.Addr().String()
	_, err = tunnel.Connect(ctxFor(t, 300*time.Millisecond), cfg)
	if !errors.As(err, &unreachable) || unreachable.Reason != "timed out" {
		t.Errorf("Connect to a port that never answers: %v", err)
	}
}

// The get user is not a developer's user.
func TestConnectRefusesTheGetUser(t *testing.T) {
	signer, _ := newKey(t)
	_, err := tunnel.Connect(ctxFor(t, 5*time.Second), tunnel.ClientConfig{Addr: "127.0.0.1:1", User: "get", Signer: signer, HostKey: signer.PublicKey()})
	if err == nil || !strings.Contains(err.Error(), "only downloads plug") {
		t.Errorf("Connect as get: %v", err)
	}
}
