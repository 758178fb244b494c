package kubeplatform

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"plug/keys"
	"plug/tunnel/clustertest"
)

// Acceptance 5, on the real cluster: the operator's change of the members,
// run with kubectl exec beside the agent, is in the agent's own audit
// trail (kubectl logs), not only on the exec session's output.
func TestOperatorMemberChangeIsInTheAgentsTrail(t *testing.T) {
	k := needKube(t)
	image := agentImage(t, k.Kube)
	a := deployAgent(t, k, image)
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	key, _ := ssh.NewPublicKey(pub)
	fp := keys.Fingerprint(key)
	out := k.Kubectl(t, "exec", "deploy/plug", "--", "/plug", "agent", "members", "add", "--user", "alice", keys.AuthorizedKey(key))
	if !strings.Contains(out, `"event":"key.accepted"`) {
		t.Fatalf("the exec session's output: %s", out)
	}
	pod := a.pod(t)
	clustertest.Eventually(t, clustertest.Settle, "the change in the agent's log", func() error {
		logs, err := k.TryKubectl("logs", pod)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(logs, "\n") {
			if strings.Contains(line, `"event":"key.accepted"`) && strings.Contains(line, `"key":"`+fp+`"`) &&
				strings.Contains(line, `"by":"the operator"`) && strings.HasPrefix(line, `{"schema":1,`) {
				return nil
			}
		}
		return errors.New("no key.accepted line for " + fp + " in:\n" + logs)
	})
}
