package tunneltest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"

	"plug/tunnel"
)

// StartAgent runs an agent for platform on 127.0.0.1 with a fresh host key
// and returns its address, its host key, and a stop function that shuts it
// down (giving every name back) and waits for it. opts adjust the agent
// before it starts (Grace, KeepAlive, Admit, BinDir...), and may keep a
// pointer to it. The agent is stopped when the test ends, and its log goes
// to the test's log.
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
		Logf: func(format string, args ...any) {
			logMu.Lock()
			defer logMu.Unlock()
			if !stopped {
				t.Logf("agent: "+format, args...)
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
