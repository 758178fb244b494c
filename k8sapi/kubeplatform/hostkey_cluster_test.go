package kubeplatform

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"plug/tunnel"
	"plug/tunnel/clustertest"
)

// presentedKey is the host key the agent behind addr presents, as the
// HostKeyError of a client pinning another key reports it.
func presentedKey(t *testing.T, addr string) *tunnel.HostKeyError {
	t.Helper()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := ssh.NewSignerFromKey(priv)
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	pinned, _ := ssh.NewSignerFromKey(other)
	var hk *tunnel.HostKeyError
	clustertest.Eventually(t, clustertest.Settle, "the agent answers SSH", func() error {
		_, err := tunnel.Connect(bg, tunnel.ClientConfig{Addr: addr, User: "dev", Signer: signer, HostKey: pinned.PublicKey()})
		if !errors.As(err, &hk) {
			return err
		}
		return nil
	})
	return hk
}

// restartAgent runs kubectl rollout restart of the agent and waits for it.
func restartAgent(t *testing.T, k *kube) {
	t.Helper()
	k.Kubectl(t, "rollout", "restart", "deployment/plug")
	k.Kubectl(t, "rollout", "status", "deployment/plug", "--timeout=120s")
}

var fingerprintLog = regexp.MustCompile(`host key fingerprint (SHA256:[A-Za-z0-9+/]+) \(developers install with: ssh -p \S+ get@\S+ install \| sh -s -- --fingerprint SHA256:`)

// Issue acceptance 1, on the real cluster: the agent without the rule on
// plug-state, with the Secret deleted, and after plug agent host-key rotate
// behaves as deploy/README.md "The host key" says, and a developer's
// pinned profile gets the documented message and remedy.
func TestHostKeyWithoutTheSecretAndAfterRotate(t *testing.T) {
	k := needKube(t)
	image := agentImage(t, k.Kube)
	withoutRule := func(m string) string {
		rule := "  - apiGroups: [\"\"]\n    resources: [secrets]\n    resourceNames: [plug-state]\n    verbs: [get, patch]\n"
		if !strings.Contains(m, rule) {
			t.Fatal("the manifest has no rule on plug-state as the test knows it")
		}
		return strings.Replace(m, rule, "", 1)
	}
	var a deployedAgent
	a.k = k
	relay := startRelay(t, func() string {
		_, ip := a.newestPod()
		return ip + ":2222"
	})
	podLog := func() string { return k.Kubectl(t, "logs", a.pod(t)) }

	// 1. Without the rule: Ready (rollout status), a key of its own, said
	// loudly with the command that grants the rule.
	deployManifest(t, k, image, 0, withoutRule)
	k.Kubectl(t, "rollout", "status", "deployment/plug", "--timeout=120s")
	log := podLog()
	for _, want := range []string{
		"WARNING: the host key is not shared: the agent lacks the right patch secrets/plug-state",
		"WARNING: to share one host key again: kubectl -n " + k.Namespace + " patch role plug",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("without the rule, the agent's log lacks %q:\n%s", want, log)
		}
	}
	m := fingerprintLog.FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("the agent's log has no fingerprint line:\n%s", log)
	}
	if got := presentedKey(t, relay.addr).Offered; got != m[1] {
		t.Errorf("the agent presents %s, its log says %s", got, m[1])
	}

	// 2. The rule back: the shared key in plug-state.
	deployManifest(t, k, image, 0)
	restartAgent(t, k)
	shared := presentedKey(t, relay.addr)
	secret, err := k.admin.Secrets(k.Namespace).Get(bg, StateSecret)
	if err != nil || len(secret.Data[hostKeyField]) == 0 {
		t.Fatalf("plug-state after a start with the rule: %v", err)
	}

	// 3. The Secret deleted: the next agent starts, Ready, with a key of its
	// own, and names the one command that makes the Secret again; that
	// command brings back one shared key.
	if err := k.admin.Secrets(k.Namespace).Delete(bg, StateSecret, nil); err != nil {
		t.Fatal(err)
	}
	restartAgent(t, k)
	log = podLog()
	fix := "kubectl -n " + k.Namespace + " create secret generic plug-state && kubectl -n " + k.Namespace + " rollout restart deployment/plug"
	if !strings.Contains(log, "WARNING: the host key is not shared: the Secret plug-state is missing") || !strings.Contains(log, "WARNING: to share one host key again: "+fix) {
		t.Errorf("with the Secret deleted, the agent's log does not say so with %q:\n%s", fix, log)
	}
	if own := presentedKey(t, relay.addr); own.Offered == shared.Offered {
		t.Errorf("with the Secret deleted the agent still presents %s", own.Offered)
	}
	k.Kubectl(t, "create", "secret", "generic", "plug-state")
	restartAgent(t, k)
	if strings.Contains(podLog(), "WARNING") {
		t.Errorf("after the command, the agent still warns:\n%s", podLog())
	}
	secret, err = k.admin.Secrets(k.Namespace).Get(bg, StateSecret)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := ssh.ParsePrivateKey(secret.Data[hostKeyField])
	if err != nil {
		t.Fatalf("plug-state after the command: %v", err)
	}
	if got := presentedKey(t, relay.addr).Offered; got != ssh.FingerprintSHA256(stored.PublicKey()) {
		t.Errorf("the agent presents %s, plug-state holds %s", got, ssh.FingerprintSHA256(stored.PublicKey()))
	}

	// 4. Rotate in the pod, restart as it says: the agent presents the
	// printed key; a developer pinning the old one is refused with the
	// remedy, and the pin it prints works.
	out := k.Kubectl(t, "exec", "deploy/plug", "--", "/plug", "agent", "host-key", "rotate")
	line, _, _ := strings.Cut(out, "\n")
	rotated, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		t.Fatalf("rotate's first line is not the new key (%v):\n%s", err, out)
	}
	if !strings.Contains(out, "1. Restart the agents: kubectl -n "+k.Namespace+" rollout restart deployment/plug") {
		t.Errorf("rotate does not say how to restart the agents:\n%s", out)
	}
	if got := presentedKey(t, relay.addr).Offered; got != ssh.FingerprintSHA256(stored.PublicKey()) {
		t.Errorf("before the restart the agent presents %s, want the old key", got)
	}
	restartAgent(t, k)
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	dev, _ := ssh.NewSignerFromKey(priv)
	_, err = tunnel.Connect(bg, tunnel.ClientConfig{Addr: relay.addr, User: "dev", Signer: dev, HostKey: stored.PublicKey(), Profile: "kube"})
	var hk *tunnel.HostKeyError
	if !errors.As(err, &hk) || hk.Offered != ssh.FingerprintSHA256(rotated) {
		t.Fatalf("a profile pinning the old key: %v", err)
	}
	pin := regexp.MustCompile(`--host-key '([^']+)' --force`).FindStringSubmatch(err.Error())
	if pin == nil || !strings.Contains(err.Error(), "plug agent host-key rotate") {
		t.Fatalf("the refusal does not give the remedy:\n%v", err)
	}
	repinned, _, _, _, perr := ssh.ParseAuthorizedKey([]byte(pin[1]))
	if perr != nil || !bytes.Equal(repinned.Marshal(), rotated.Marshal()) {
		t.Fatalf("the remedy pins %q (%v), want the rotated key", pin[1], perr)
	}
	s, err := tunnel.Connect(bg, tunnel.ClientConfig{Addr: relay.addr, User: "dev", Signer: dev, HostKey: repinned,
		Run: tunnel.RunInfo{Serves: true}})
	if err != nil {
		t.Fatalf("connecting with the key the remedy pins: %v", err)
	}
	s.Close()
}
