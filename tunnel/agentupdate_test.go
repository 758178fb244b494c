package tunnel_test

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"plug/keys"
	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// updater is a platform that can move the agent, and records what it was
// asked. With hold set, a move ends only once hold is closed.
type updater struct {
	*tunneltest.Platform
	hold  chan struct{}
	mu    sync.Mutex
	asked []tunnel.AgentUpdateRequest
}

func (u *updater) UpdateAgent(_ context.Context, req tunnel.AgentUpdateRequest, progress func(string)) (tunnel.AgentRollout, error) {
	u.mu.Lock()
	u.asked = append(u.asked, req)
	u.mu.Unlock()
	progress("deployment/plug: image set")
	if u.hold != nil {
		<-u.hold
	}
	return tunnel.AgentRollout{Workload: "deployment/plug", From: "plug:1", To: req.Image, Pods: []string{"plug-new"}}, nil
}

func (u *updater) requests() []tunnel.AgentUpdateRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.asked)
}

// Only a key that oversees the agent moves it; the request and its outcome
// are audited, and what the platform tells reaches the CLI.
func TestAgentUpdateIsForOverseersAndAudited(t *testing.T) {
	admin, _ := newKey(t)
	dev, _ := newKey(t)
	u := &updater{Platform: tunneltest.NewPlatform()}
	audit := tunneltest.NewAudit()
	addr, hostKey, _ := tunneltest.StartAgent(t, u, func(a *tunnel.Agent) {
		a.Keys, a.Audit = tunneltest.Overseers{keys.Fingerprint(admin.PublicKey())}, audit.Sink
	})
	ctx := ctxFor(t, 20*time.Second)

	_, err := tunnel.UpdateAgent(ctx, tunnel.ClientConfig{Addr: addr, User: "dev", Signer: dev, HostKey: hostKey}, "plug:2", 0, nil)
	if err == nil || !strings.Contains(err.Error(), "only a key that oversees this agent moves its image") {
		t.Fatalf("a key that does not oversee the agent: %v", err)
	}
	refused := audit.Await(t, clustertest.Settle, "agent.update_refused", func(e tunnel.AuditEvent) bool { return e.Event == tunnel.AuditAgentUpdateRefused })
	if refused.Key != keys.Fingerprint(dev.PublicKey()) || refused.Image != "plug:2" {
		t.Errorf("agent.update_refused: %+v", refused)
	}
	if got := u.requests(); len(got) != 0 {
		t.Fatalf("the platform was asked %+v for a key that does not oversee the agent", got)
	}

	var told []string
	res, err := tunnel.UpdateAgent(ctx, tunnel.ClientConfig{Addr: addr, User: "admin", Signer: admin, HostKey: hostKey}, "plug:2", 30*time.Second, func(l string) { told = append(told, l) })
	if err != nil {
		t.Fatal(err)
	}
	if res.Agent != "agent-0" || res.To != "plug:2" || res.From != "plug:1" || !slices.Equal(res.Pods, []string{"plug-new"}) || !slices.Equal(told, []string{"agent agent-0 moves itself to image plug:2", "deployment/plug: image set"}) {
		t.Errorf("the answer: %+v, told %q", res, told)
	}
	got := u.requests()
	if len(got) != 1 || got[0].Image != "plug:2" || got[0].Wait != 30*time.Second || !strings.HasPrefix(got[0].By, "admin (SHA256:") {
		t.Errorf("the platform was asked %+v", got)
	}
	asked := audit.Await(t, clustertest.Settle, "agent.update", func(e tunnel.AuditEvent) bool { return e.Event == tunnel.AuditAgentUpdate })
	done := audit.Await(t, clustertest.Settle, "agent.updated", func(e tunnel.AuditEvent) bool { return e.Event == tunnel.AuditAgentUpdated })
	if asked.Image != "plug:2" || asked.Key != keys.Fingerprint(admin.PublicKey()) || done.Image != "plug:2" || done.Previous != "plug:1" {
		t.Errorf("audit: %+v, %+v", asked, done)
	}
}

// The old agent is stopped by the rollout it follows, once the new one is
// ready: it answers the developer before it closes their connection.
func TestAgentStoppedDuringItsMoveAnswersFirst(t *testing.T) {
	admin, _ := newKey(t)
	u := &updater{Platform: tunneltest.NewPlatform(), hold: make(chan struct{})}
	addr, hostKey, stop := tunneltest.StartAgent(t, u, func(a *tunnel.Agent) {
		a.Keys = tunneltest.Overseers{keys.Fingerprint(admin.PublicKey())}
	})
	type answer struct {
		res tunnel.AgentUpdate
		err error
	}
	answered := make(chan answer, 1)
	asked := make(chan struct{})
	var once sync.Once
	go func() {
		res, err := tunnel.UpdateAgent(ctxFor(t, 30*time.Second), tunnel.ClientConfig{Addr: addr, User: "admin", Signer: admin, HostKey: hostKey}, "plug:2", 0,
			func(l string) {
				if strings.HasPrefix(l, "deployment/plug") {
					once.Do(func() { close(asked) })
				}
			})
		answered <- answer{res, err}
	}()
	<-asked
	stopped := make(chan struct{})
	go func() {
		stop()
		close(stopped)
	}()
	clustertest.Until(t, clustertest.Settle, "the stopping agent to take no more connections", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	close(u.hold)
	a := <-answered
	if a.err != nil || a.res.To != "plug:2" || !slices.Equal(a.res.Pods, []string{"plug-new"}) {
		t.Errorf("the answer of a stopping agent: %+v, %v", a.res, a.err)
	}
	<-stopped
}

// An agent whose platform cannot move it (Swarm, memory) refuses, saying
// how to move it instead.
func TestAgentUpdateRefusedWhereThePlatformCannot(t *testing.T) {
	admin, _ := newKey(t)
	addr, hostKey, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform(), func(a *tunnel.Agent) {
		a.Keys = tunneltest.Overseers{keys.Fingerprint(admin.PublicKey())}
	})
	_, err := tunnel.UpdateAgent(ctxFor(t, 20*time.Second), tunnel.ClientConfig{Addr: addr, User: "admin", Signer: admin, HostKey: hostKey}, "plug:2", 0, nil)
	if err == nil || !strings.Contains(err.Error(), "cannot move its own image") || !strings.Contains(err.Error(), "move it the way it was deployed") {
		t.Fatalf("UpdateAgent on a platform that cannot: %v", err)
	}
}

// CheckImage takes image references and nothing else.
func TestCheckImage(t *testing.T) {
	for _, ok := range []string{
		"plug:dev", "plug", "registry.example.com/plug:2.31.0", "localhost:5000/team/plug:v1_2-rc.1",
		"docker.io/library/plug:dev", "plug@sha256:" + strings.Repeat("ab", 32), "reg.example.com:443/a/b/c:t@sha256:" + strings.Repeat("0", 64),
		"[::1]:5000/plug:x", "my_registry-1.example.com/plug__x/y.z:TAG",
	} {
		if err := tunnel.CheckImage(ok); err != nil {
			t.Errorf("CheckImage(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{
		"", "Plug:dev", "plug:dev; rm -rf /", "plug:-x", "plug:.x", "plug:dev\n", "plug::x", "-plug", "plug/", "/plug",
		"plug:" + strings.Repeat("t", 129), "plug@sha256:abc", "plug:dev\x1b[31m", "a/" + strings.Repeat("b", 520), "plug:dev ",
	} {
		if err := tunnel.CheckImage(bad); err == nil {
			t.Errorf("CheckImage(%q) accepted it", bad)
		}
	}
}
