package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
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

// A switch the agent does not understand stops it at start, naming the
// switch and its values.
func TestAgentRefusesABadSwitch(t *testing.T) {
	for _, tc := range []struct{ name, value, want string }{
		{"PLUG_OPEN_SERVE", "some", "PLUG_OPEN_SERVE=some is not one of takeover, new, none"},
		{"PLUG_OPEN_VOLUMES", "rw", "PLUG_OPEN_VOLUMES=rw is not one of read-write, read-only, off"},
		{"PLUG_OPEN_ENV_SECRETS", "no", "PLUG_OPEN_ENV_SECRETS=no is not one of on, off"},
		{"PLUG_AUDIT_DIALS", "yes", "PLUG_AUDIT_DIALS=yes is neither on nor off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("PLUG_PLATFORM", "memory")
			t.Setenv("PLUG_ADDR", "127.0.0.1:0")
			t.Setenv("PLUG_STATE_DIR", t.TempDir())
			t.Setenv(tc.name, tc.value)
			code, _, stderr := plug(t, "agent")
			if code != ExitFailed || !strings.Contains(stderr, tc.want) {
				t.Errorf("%s=%s: exit %d, stderr:\n%s", tc.name, tc.value, code, stderr)
			}
		})
	}
}

func TestAgentServesUntilStopped(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	t.Setenv("PLUG_PLATFORM", "memory")
	t.Setenv("PLUG_ADDR", "127.0.0.1:0")
	t.Setenv("PLUG_STATE_DIR", state)
	t.Setenv("PLUG_AGENT_ID", "agent-test")
	var stderr tunneltest.Buffer
	c := newCLI(strings.NewReader(""), &stderr, &stderr)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.agent(ctx) }()
	clustertest.Eventually(t, clustertest.Settle, "the agent says it listens", func() error {
		select {
		case err := <-done:
			t.Fatalf("the agent stopped: %v\n%s", err, stderr.String())
		default:
		}
		if !strings.Contains(stderr.String(), "agent-test "+tunnel.Version+" listening on 127.0.0.1:") {
			return fmt.Errorf("it said:\n%s", stderr.String())
		}
		return nil
	})
	if _, err := os.Stat(filepath.Join(state, "ssh_host_ed25519_key")); err != nil {
		t.Errorf("no host key in the state directory: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the agent stopped with %v", err)
		}
	case <-time.After(clustertest.Settle):
		t.Fatal("the agent did not stop")
	}
}
