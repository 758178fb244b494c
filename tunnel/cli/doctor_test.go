package cli

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"plug/keys"
	"plug/tunnel"
	"plug/tunnel/tunneltest"
)

// roleLacking is the in-memory platform without the right to patch
// Services until it is granted.
type roleLacking struct {
	*tunneltest.Platform
	granted atomic.Bool
}

const patchFix = `kubectl -n ns patch role plug --type=json -p '[{"op":"add","path":"/rules/-","value":{"apiGroups":[""],"resources":["services"],"verbs":["patch"]}}]'`

func (p *roleLacking) Rights(context.Context) ([]tunnel.Right, error) {
	const feature = "-s: create a name, take over a deployed Service"
	return []tunnel.Right{
		{Rule: "get services", Feature: feature, Required: true, Granted: true},
		{Rule: "create services", Feature: feature, Required: true, Granted: true},
		{Rule: "patch services", Feature: feature, Required: true, Granted: p.granted.Load(), Fix: patchFix},
		{Rule: "watch pods", Feature: "follow pods at once", Granted: true},
	}, nil
}

// doctorHome is a ~/.plug whose profile "kube" reaches an agent of
// platform; opts adjust the agent.
func doctorHome(t *testing.T, platform tunnel.Platform, opts ...func(*tunnel.Agent)) keys.Store {
	t.Helper()
	store := newHome(t).store
	addr, hostKey, _ := tunneltest.StartAgent(t, platform, opts...)
	host, port, _ := net.SplitHostPort(addr)
	portNum, _ := strconv.Atoi(port)
	if err := store.AddProfile(keys.Profile{Name: "kube", Host: host, Port: portNum, HostKey: keys.AuthorizedKey(hostKey), Platform: "kubernetes"}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := store.GenerateKey("kube", "dev@test", false); err != nil {
		t.Fatal(err)
	}
	return store
}

func expectLines(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("doctor's report lacks %q:\n%s", w, out)
		}
	}
}

// A healthy agent: every line ok, exit 0.
func TestDoctorOfAHealthyAgent(t *testing.T) {
	doctorHome(t, tunneltest.NewPlatform())
	code, out, stderr := plug(t, "doctor", "-p", "kube")
	if code != 0 || strings.Contains(out, "FAIL") || strings.Contains(out, "warn") {
		t.Fatalf("exit %d\n%s%s", code, out, stderr)
	}
	expectLines(t, out,
		"ok   profile kube: agent at 127.0.0.1:",
		"ok   key pair ",
		"ok   agent at 127.0.0.1:",
		"matches the one the profile pins",
		"ok   the agent accepts the key SHA256:",
		"ok   versions: the same plug "+tunnel.Version+" on both ends",
		"ok   agent agent-0 on in-memory platform: serves runs")
}

// Acceptance 5, without a cluster: doctor prints the one command that
// grants the missing right, and once it is granted comes back clean.
func TestDoctorPrintsTheGrantOfAMissingRight(t *testing.T) {
	platform := &roleLacking{Platform: tunneltest.NewPlatform()}
	doctorHome(t, platform)
	code, out, stderr := plug(t, "doctor", "-p", "kube")
	if code != ExitFailed || !strings.Contains(stderr, "2 check(s) failed") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
	expectLines(t, out,
		"ok   get, create services: -s: create a name, take over a deployed Service",
		"FAIL missing right patch services, which runs need (-s: create a name, take over a deployed Service)\n     grant it alone with:\n       "+patchFix+"\n",
		"FAIL agent agent-0 on in-memory platform: the agent serves no runs: it lacks rights in the cluster that runs need (patch services)",
		"ok   watch pods: follow pods at once")

	platform.granted.Store(true)
	code, out, stderr = plug(t, "doctor", "-p", "kube")
	if code != 0 || strings.Contains(out, "FAIL") {
		t.Errorf("after the grant: exit %d\n%s%s", code, out, stderr)
	}
}

// What doctor says of each way a profile can fail to reach its agent.
func TestDoctorSaysWhyTheAgentIsNotReached(t *testing.T) {
	h := newHome(t)
	refused := freeLoopbackPort(t)
	for _, tc := range []struct {
		name, host string
		port       int
		want       []string
	}{
		{"refused", "127.0.0.1", refused, []string{"FAIL agent at 127.0.0.1:" + strconv.Itoa(refused) + ": connection refused",
			"Nothing listens on port", "NodePort 32222", "kubectl -n NAMESPACE port-forward svc/plug 2222:2222"}},
		{"nosuchhost", "no-such-host.invalid", 2222, []string{"FAIL agent at no-such-host.invalid:2222: DNS lookup failed",
			"The host name no-such-host.invalid does not resolve from this machine"}},
	} {
		if err := h.store.AddProfile(keys.Profile{Name: tc.name, Host: tc.host, Port: tc.port, HostKey: h.hostKey}, false); err != nil {
			t.Fatal(err)
		}
		code, out, _ := plug(t, "doctor", "-p", tc.name)
		if code != ExitFailed {
			t.Errorf("%s: exit %d", tc.name, code)
		}
		expectLines(t, out, append(tc.want, "FAIL no key pair for profile "+tc.name)...)
		if strings.Contains(out, "versions") {
			t.Errorf("%s: doctor went on past an agent it could not reach:\n%s", tc.name, out)
		}
	}
}

// A host key other than the pinned one, and a key the agent refuses.
func TestDoctorOfAChangedHostKeyAndARefusedKey(t *testing.T) {
	store := doctorHome(t, tunneltest.NewPlatform(), func(a *tunnel.Agent) {
		a.Keys = tunneltest.RefuseKeys("not a member")
	})
	code, out, _ := plug(t, "doctor", "-p", "kube")
	if code != ExitFailed {
		t.Errorf("exit %d", code)
	}
	expectLines(t, out, "ok   host key", "FAIL the agent at 127.0.0.1:", "refused the key SHA256:", "The agent says: key SHA256:", "not a member")

	prof, _ := store.Profile("kube")
	other, _ := keys.Open(t.TempDir()).GenerateKey("other", "", false)
	prof.HostKey = keys.AuthorizedKey(other)
	if err := store.AddProfile(prof, true); err != nil {
		t.Fatal(err)
	}
	code, out, _ = plug(t, "doctor", "-p", "kube")
	if code != ExitFailed {
		t.Errorf("exit %d", code)
	}
	expectLines(t, out, "FAIL host key: the agent at 127.0.0.1:", "but the profile pins "+keys.Fingerprint(other),
		"the operator gave the agent a new key (plug agent host-key rotate)",
		"plug profile add kube --host 127.0.0.1 --port ", "--host-key 'ssh-ed25519 AAAA", "' --force",
		"install | sh -s -- --fingerprint SHA256:")
}

func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
