//go:build unix

package swarmplatform

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"plug/tunnel"
)

// Issue 12, acceptance 2 on the real Swarm, with the agent deployed as a
// swarm service: -s of the agent's own service and of a service the
// operator protects (label plug.dev/protect=true) is refused, saying why,
// and changes neither; the agent's own service is no name runs dial.
func TestDeployedAgentNeverServesItsOwnOrAProtectedService(t *testing.T) {
	s := needSwarm(t)
	image := agentImage(t)
	ctx := context.Background()
	protected := s.name("payments")
	s.removeRelays(t, protected)
	spec := s.workloadSpec(protected, "serve", "-name", "deployed", ":8080")
	spec.Labels[labelProtect] = "true"
	protectedID := s.createService(t, spec, 1)
	addr, hostKey := s.deployAgent(t, image)
	agent := s.name("agent")
	s.removeRelays(t, agent)
	_, agentSvc := s.rawSpec(t, agent)
	protectedBefore, _ := s.rawSpec(t, protectedID)

	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := ssh.NewSignerFromKey(priv)
	sess, err := tunnel.Connect(ctx, tunnel.ClientConfig{Addr: addr, User: "dev", Signer: signer, HostKey: hostKey, Run: tunnel.RunInfo{Serves: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	local, _ := countingServer(t, "local")
	for _, tc := range []struct {
		name string
		port int
		want string
	}{
		{agent, 2222, "plug's own agent service"},
		{protected, 8080, "protected by the operator (label plug.dev/protect=true"},
	} {
		_, err := sess.Serve(ctx, tc.name, tc.port, local)
		var refused *tunnel.ServeError
		if !errors.As(err, &refused) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("-s %s:%d: %v, want a refusal saying %q", tc.name, tc.port, err, tc.want)
		}
		s.noRelay(t, tc.name)
	}
	if _, after := s.rawSpec(t, agentSvc.ID); after.Version != agentSvc.Version {
		t.Errorf("the refused -s changed the agent's service (version %d -> %d)", agentSvc.Version.Index, after.Version.Index)
	}
	s.sameSpec(t, protectedID, protectedBefore)
	if c, err := sess.Dial(ctx, agent+":2222"); err == nil {
		c.Close()
		t.Error("a run dialled the agent's own service")
	} else if !strings.Contains(err.Error(), "(rule: cluster names)") {
		t.Errorf("dialling the agent's own service: %v", err)
	}
}
