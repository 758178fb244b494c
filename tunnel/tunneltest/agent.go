package tunneltest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/tunnel"
)

// StartAgent runs an agent for platform on 127.0.0.1 with a fresh host key
// and returns its address, its host key, and a stop function that shuts it
// down (giving every name back) and waits for it. opts adjust the agent
// before it starts (Grace, KeepAlive, Admit, BinDir, Audit...), and may
// keep a pointer to it. Its Drain is 100 ms: the in-memory platform
// (Platform) sends no caller to a name once Release has returned, and
// those it sent before are accepted within it. The agent is
// stopped when the test ends, and its log and audit trail go to the
// test's log.
func StartAgent(t testing.TB, platform tunnel.Platform, opts ...func(*tunnel.Agent)) (addr string, hostKey ssh.PublicKey, stop func()) {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(key)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logMu sync.Mutex
	stopped := false
	agent := &tunnel.Agent{
		Platform: platform,
		HostKey:  signer,
		ID:       "agent-0",
		Drain:    100 * time.Millisecond,
		Logf: func(format string, args ...any) {
			logMu.Lock()
			defer logMu.Unlock()
			if !stopped {
				t.Logf("agent: "+format, args...)
			}
		},
		Audit: func(e tunnel.AuditEvent) {
			logMu.Lock()
			defer logMu.Unlock()
			if !stopped {
				t.Logf("audit: %s run %s %s %s:%d %s %s %s", e.Event, e.Run, e.User, e.Name, e.Port, e.Mode, e.How, e.Reason)
			}
		},
	}
	for _, opt := range opts {
		opt(agent)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- agent.Serve(ctx, l) }()
	stop = sync.OnceFunc(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("agent: %v", err)
		}
		logMu.Lock()
		stopped = true
		logMu.Unlock()
	})
	t.Cleanup(stop)
	return l.Addr().String(), signer.PublicKey(), stop
}
