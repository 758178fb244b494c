package cli

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"plug/keys"
	"plug/tunnel"
	"plug/tunnel/tunneltest"
)

// buildVersion builds plug stamped with version into dir/name; ldflags
// are more -X flags.
func buildVersion(t *testing.T, dir, name, version string, ldflags ...string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	build := exec.Command("go", "build", "-trimpath", "-ldflags", strings.Join(append([]string{"-X plug/tunnel.Version=" + version}, ldflags...), " "), "-o", out, "plug")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build plug %s: %v\n%s", version, err, msg)
	}
	return out
}

// updateWorld is a plug binary of version v1.0.0 and an agent handing out
// plug v1.1.0 for this system, listed in its SHA256SUMS with digest (the
// binary's own when empty), and a profile "kube" for that agent.
func updateWorld(t *testing.T, digest string) (cli, served string) {
	t.Helper()
	store := newHome(t).store
	bin := t.TempDir()
	cli = buildVersion(t, t.TempDir(), "plug", "v1.0.0")
	served = buildVersion(t, t.TempDir(), "plug-"+runtime.GOOS+"-"+runtime.GOARCH, "v1.1.0")
	data, err := os.ReadFile(served)
	if err != nil {
		t.Fatal(err)
	}
	tunneltest.WriteBinary(t, bin, filepath.Base(served), data)
	if digest == "" {
		sum := sha256.Sum256(data)
		digest = hex.EncodeToString(sum[:])
	}
	sums := fmt.Sprintf("%s  %s\n", digest, filepath.Base(served))
	if err := os.WriteFile(filepath.Join(bin, "SHA256SUMS"), []byte(sums), 0o644); err != nil {
		t.Fatal(err)
	}
	was := tunnel.Version
	tunnel.Version = "v1.1.0" // the agent's, as its SSH version string says
	t.Cleanup(func() { tunnel.Version = was })
	addr, hostKey, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform(), func(a *tunnel.Agent) { a.BinDir = bin })
	host, port, _ := net.SplitHostPort(addr)
	portNum, _ := strconv.Atoi(port)
	if err := store.AddProfile(keys.Profile{Name: "kube", Host: host, Port: portNum, HostKey: keys.AuthorizedKey(hostKey)}, false); err != nil {
		t.Fatal(err)
	}
	return cli, served
}

// runBinary runs a plug binary with args, in the test's PLUG_HOME.
func runBinary(t *testing.T, bin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if exit, ok := err.(*exec.ExitError); ok {
		return exit.ExitCode(), out.String(), errOut.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, out.String(), errOut.String()
}

// plug update makes a plug of version N the agent's plug of version N+1,
// byte for byte, and leaves nothing else beside it.
func TestUpdateBringsTheCLIToTheAgentsVersion(t *testing.T) {
	cli, served := updateWorld(t, "")
	code, _, stderr := runBinary(t, cli, "update", "-p", "kube")
	if code != 0 || !strings.Contains(stderr, "is now plug v1.1.0 from the agent of kube (was v1.0.0") {
		t.Fatalf("plug update: exit %d\n%s", code, stderr)
	}
	got, _ := os.ReadFile(cli)
	want, _ := os.ReadFile(served)
	if !bytes.Equal(got, want) {
		t.Errorf("the updated plug (%d bytes) is not the agent's copy (%d bytes)", len(got), len(want))
	}
	if _, stdout, _ := runBinary(t, cli, "version"); !strings.HasPrefix(stdout, "plug v1.1.0 ") {
		t.Errorf("plug version after the update: %q", stdout)
	}
	if entries, _ := os.ReadDir(filepath.Dir(cli)); len(entries) != 1 {
		t.Errorf("beside the updated plug: %v", entries)
	}
}

// A download whose SHA-256 is not the one the agent lists changes nothing:
// the binary keeps its bytes, the download is removed, update fails.
func TestUpdateWithAWrongDigestChangesNothing(t *testing.T) {
	cli, _ := updateWorld(t, strings.Repeat("ab", 32))
	before, _ := os.ReadFile(cli)
	code, _, stderr := runBinary(t, cli, "update", "-p", "kube")
	if code != ExitFailed || !strings.Contains(stderr, "plug is unchanged: the download from the agent at") ||
		!strings.Contains(stderr, "but the agent's SHA256SUMS lists "+strings.Repeat("ab", 32)) {
		t.Fatalf("plug update of a tampered download: exit %d\n%s", code, stderr)
	}
	after, _ := os.ReadFile(cli)
	if !bytes.Equal(before, after) {
		t.Error("a tampered download changed the plug binary")
	}
	if entries, _ := os.ReadDir(filepath.Dir(cli)); len(entries) != 1 {
		t.Errorf("beside plug after a refused update: %v", entries)
	}
	if _, stdout, _ := runBinary(t, cli, "version"); !strings.HasPrefix(stdout, "plug v1.0.0 ") {
		t.Errorf("plug version after a refused update: %q", stdout)
	}
}

// plug help update describes --agent; bad --agent and --wait arguments are
// usage errors that contact nothing (the profile points at a tripwire).
func TestUpdateAgentUsage(t *testing.T) {
	h := newHome(t)
	if err := h.store.AddProfile(keys.Profile{Name: "kube", Host: h.host, Port: h.port, HostKey: h.hostKey}, false); err != nil {
		t.Fatal(err)
	}
	if _, stdout, _ := plug(t, "help", "update"); !strings.Contains(stdout, "plug update [-p PROFILE] --agent IMAGE [--wait DURATION]") ||
		!strings.Contains(stdout, "is undone: the previous image is set") || !strings.Contains(stdout, "The Role is never changed") {
		t.Errorf("plug help update:\n%s", stdout)
	}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--agent", "Plug:Dev"}, "is not an image reference"},
		{[]string{"--agent", ""}, "no image given"},
		{[]string{"--agent", "plug:2", "--wait", "1s"}, "--wait 1s: give a duration between 10s and 15m0s"},
		{[]string{"--wait", "1m"}, "--wait is for --agent IMAGE"},
	} {
		code, _, stderr := plug(t, append([]string{"update", "-p", "kube"}, tc.args...)...)
		if code != ExitUsage || !strings.Contains(stderr, tc.says) {
			t.Errorf("plug update %q: exit %d, %s", tc.args, code, stderr)
		}
	}
}
