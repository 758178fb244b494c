package kubeplatform

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/k8sapi"
	"plug/tunnel"
	"plug/tunnel/clustertest"
)

// Acceptance 2 and 3 on the real cluster, with the manifest's agent at two
// replicas, open admission and PLUG_OPEN_SERVE=new: a key nobody vouched
// for is refused the takeover of the deployed web, naming the switch, and
// web is untouched; it serves a new name on each replica. An admin the
// operator named denies the key through one replica: the runs on both
// replicas end within 2 s, each developer reading who denied the key and
// why, and the names are given back; the key's next connection to either
// replica is refused saying so. The denial is in the agent's audit trail.
// The operator lifts it with plug agent members undeny (its audit line in
// the agent's log), and the key gets in again.
func TestDeployedTwoReplicasDenyAKey(t *testing.T) {
	k := &kube{Kube: clustertest.NeedKube(t)}
	image := agentImage(t, k.Kube)
	k.setupClients(t)
	k.deployWeb(t, 1)
	before := k.snapshot(t, "web")
	a := deployAgent(t, k, image, twoReplicas, clustertest.ManifestEnv("PLUG_OPEN_SERVE", "new"))
	out := k.Kubectl(t, "get", "pod", "-l", "app.kubernetes.io/name=plug", "-o", "jsonpath={range .items[*]}{.metadata.name} {.status.podIP}{\"\\n\"}{end}")
	var pods, ips []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		name, ip, _ := strings.Cut(line, " ")
		pods, ips = append(pods, name), append(ips, ip)
	}
	if len(ips) != 2 {
		t.Fatalf("agent pods %q, want two", out)
	}
	admin, dev := newSigner(t), newSigner(t)
	devFP := ssh.FingerprintSHA256(dev.PublicKey())
	k.Kubectl(t, "exec", "deploy/plug", "--", "/plug", "agent", "members", "admin", ssh.FingerprintSHA256(admin.PublicKey()))
	cfg := func(i int, user string, s ssh.Signer) tunnel.ClientConfig {
		return tunnel.ClientConfig{Addr: net.JoinHostPort(ips[i], "2222"), User: user, Signer: s, HostKey: a.hostKey, Run: tunnel.RunInfo{Serves: true}}
	}

	local := net.JoinHostPort(k.NodeIP, fmt.Sprint(k.local.port))
	var sessions []*tunnel.Session
	for i, name := range []string{"promo-a", "promo-b"} {
		s, err := tunnel.Connect(bg, cfg(i, "dev", dev))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if i == 0 {
			_, err := s.Serve(bg, "web", 80, local)
			if err == nil || !strings.Contains(err.Error(), "PLUG_OPEN_SERVE=new") || !strings.Contains(err.Error(), "deployed service") {
				t.Errorf("a stranger's takeover of web with PLUG_OPEN_SERVE=new: %v", err)
			}
			if err := k.snapshot(t, "web").sameAs(before); err != nil {
				t.Errorf("the refused takeover changed web: %v", err)
			}
		}
		if served, err := s.Serve(bg, name, 80, local); err != nil || served.TookOver {
			t.Fatalf("a new name: %+v %v", served, err)
		}
		sessions = append(sessions, s)
	}
	clustertest.Eventually(t, clustertest.Settle, "both runs seen, their user marked asserted", func() error {
		runs, all, err := tunnel.Who(bg, cfg(1, "admin", admin))
		if err != nil || !all || len(runs) != 2 || !runs[0].UserAsserted || runs[0].Key != devFP {
			return fmt.Errorf("who: %+v %t %v", runs, all, err)
		}
		return nil
	})

	start := time.Now()
	if _, done, err := tunnel.ManageMembers(bg, cfg(1, "admin", admin), "deny", devFP, "laptop stolen"); err != nil {
		t.Fatalf("deny: %q %v", done, err)
	}
	for i, s := range sessions {
		select {
		case <-s.Done():
		case <-time.After(2*time.Second - time.Since(start)):
			t.Fatalf("the denied key's run on %s goes on 2 s after the denial", pods[i])
		}
		var e *tunnel.EndedError
		if !errors.As(s.Err(), &e) || !strings.HasPrefix(e.By, "admin (SHA256:") || !strings.Contains(e.Reason, "laptop stolen") {
			t.Errorf("the developer reads, on %s: %v", pods[i], s.Err())
		}
	}
	t.Logf("the denied key's runs ended on both replicas %s after the denial", time.Since(start).Round(time.Millisecond))
	clustertest.Eventually(t, clustertest.Settle, "the new names given back", func() error {
		for _, name := range []string{"promo-a", "promo-b"} {
			if _, err := k.admin.Services(k.Namespace).Get(bg, name); !k8sapi.IsNotFound(err) {
				return fmt.Errorf("%s is still there: %v", name, err)
			}
		}
		return nil
	})
	for i := range ips {
		_, err := tunnel.Connect(bg, cfg(i, "dev", dev))
		if err == nil || !strings.Contains(err.Error(), "denied by admin") || !strings.Contains(err.Error(), "undeny "+devFP) {
			t.Errorf("the denied key's next connection to %s: %v", pods[i], err)
		}
	}
	if found := findAudit(auditOf(t, k, pods[1]), tunnel.AuditKeyDenied, devFP); len(found) != 1 || found[0].Reason != "laptop stolen" || !strings.HasPrefix(found[0].By, "admin (SHA256:") {
		t.Errorf("key.denied in the audit trail of %s: %+v", pods[1], found)
	}

	out = k.Kubectl(t, "exec", pods[0], "--", "/plug", "agent", "members", "undeny", devFP)
	if !strings.Contains(out, `"event":"key.undenied"`) {
		t.Errorf("the operator's undeny: %s", out)
	}
	clustertest.Eventually(t, clustertest.Settle, "the key let in again", func() error {
		s, err := tunnel.Connect(bg, cfg(0, "dev", dev))
		if err == nil {
			s.Close()
		}
		return err
	})
	// The operator's change is in the agent's own trail, not only on the
	// exec session's output.
	if found := findAudit(auditOf(t, k, pods[0]), tunnel.AuditKeyUndenied, devFP); len(found) != 1 || found[0].By != "the operator" {
		t.Errorf("key.undenied in the audit trail of %s: %+v", pods[0], found)
	}
}
