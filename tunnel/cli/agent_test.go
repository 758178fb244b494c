package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"plug/tunnel"
)

func TestAgentRefusesWithoutPlatform(t *testing.T) {
	for _, tc := range []struct{ platform, want string }{
		{"", "no platform: set PLUG_PLATFORM"},
		{"mesos", "PLUG_PLATFORM=mesos is not a platform this agent knows"},
	} {
		t.Setenv("PLUG_PLATFORM", tc.platform)
		t.Setenv("PLUG_STATE_DIR", t.TempDir())
		code, _, stderr := plug(t, "agent")
		if code != ExitFailed || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "memory or none") {
			t.Errorf("PLUG_PLATFORM=%q: exit %d, stderr:\n%s", tc.platform, code, stderr)
		}
	}
}

func TestAgentServesUntilStopped(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	t.Setenv("PLUG_PLATFORM", "memory")
	t.Setenv("PLUG_ADDR", "127.0.0.1:0")
	t.Setenv("PLUG_STATE_DIR", state)
	t.Setenv("PLUG_AGENT_ID", "agent-test")
	var stderr lockedBuffer
	c := &cli{stdin: strings.NewReader(""), stdout: &stderr, stderr: &stderr}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.agent(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stderr.String(), "agent-test "+tunnel.Version+" listening on 127.0.0.1:") {
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not say it listens:\n%s", stderr.String())
		}
		select {
		case err := <-done:
			t.Fatalf("the agent stopped: %v\n%s", err, stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if _, err := os.Stat(filepath.Join(state, "ssh_host_ed25519_key")); err != nil {
		t.Errorf("no host key in the state directory: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the agent stopped with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not stop")
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent writers and readers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
