package cli

import (
	"bytes"
	"context"
	"log"
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

// lacking is a platform missing rights.
type lacking struct {
	*tunnel.MemoryPlatform
	rights []tunnel.Right
}

func (l lacking) Rights(context.Context) ([]tunnel.Right, error) { return l.rights, nil }

func TestCheckRightsNamesTheMissingRule(t *testing.T) {
	var logged bytes.Buffer
	logger := log.New(&logged, "", 0)
	p := lacking{tunnel.NewMemoryPlatform(), []tunnel.Right{
		{Rule: "get services", Feature: "-s", Required: true, Granted: true},
		{Rule: "patch services", Feature: "-s: take over a deployed Service", Required: true,
			Fix: "kubectl -n ns patch role plug --type=json -p '[...]'"},
		{Rule: "create pods/exec", Feature: "volumes", Required: false},
	}}
	err := checkRights(context.Background(), p, logger)
	if err == nil {
		t.Fatal("the agent would start without a required right")
	}
	for _, want := range []string{"patch services (for -s: take over a deployed Service)", "grant it with: kubectl -n ns patch role plug"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "get services") || strings.Contains(err.Error(), "pods/exec") {
		t.Errorf("error names rights that are not missing or not required:\n%v", err)
	}
	if !strings.Contains(logged.String(), "create pods/exec (for volumes)") {
		t.Errorf("a missing optional right is not logged: %q", logged.String())
	}
	p.rights = p.rights[:1]
	if err := checkRights(context.Background(), p, logger); err != nil {
		t.Errorf("all rights granted: %v", err)
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
