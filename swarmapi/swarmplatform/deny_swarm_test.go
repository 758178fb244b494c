//go:build unix

package swarmplatform

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"plug/keys"
	"plug/tunnel"
	"plug/tunnel/clustertest"
)

// The deny list and PLUG_OPEN_SERVE on the real Swarm, with open
// admission: a key nobody vouched for is refused the takeover of the
// deployed web, naming the switch, and web's spec is untouched; it serves
// a new name. The operator denies the key in the agent's container: its
// run ends within 2 s with the reason, and its next connection is refused
// saying so; the admin the operator named lifts the denial from their
// terminal, and the key gets in again.
func TestDenyOnSwarm(t *testing.T) {
	s := needSwarm(t)
	image := agentImage(t)
	ctx := context.Background()
	web := s.name("web")
	s.removeRelays(t, web)
	webID := s.createService(t, s.workloadSpec(web, "serve", "-name", "deployed", ":8080"), 1)
	before, _ := s.rawSpec(t, webID)
	addr, hostKey := s.deployAgent(t, image, "--env=PLUG_OPEN_SERVE=new")
	agent := s.name("agent")
	admin, dev := newSigner(), newSigner()
	devFP := keys.Fingerprint(dev.PublicKey())
	s.agentExec(t, agent, "/plug", "agent", "members", "admin", keys.Fingerprint(admin.PublicKey()))
	adminCfg := tunnel.ClientConfig{Addr: addr, User: "admin", Signer: admin, HostKey: hostKey}
	devCfg := tunnel.ClientConfig{Addr: addr, User: "dev", Signer: dev, HostKey: hostKey, Run: tunnel.RunInfo{Serves: true}}

	sess, err := tunnel.Connect(ctx, devCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	local, _ := countingServer(t, "laptop")
	if _, err := sess.Serve(ctx, web, 8080, local); err == nil || !strings.Contains(err.Error(), "PLUG_OPEN_SERVE=new") {
		t.Errorf("a stranger's takeover with PLUG_OPEN_SERVE=new: %v", err)
	}
	s.sameSpec(t, webID, before)
	promo := s.name("promo")
	s.removeRelays(t, promo)
	if served, err := sess.Serve(ctx, promo, 8080, local); err != nil || served.TookOver {
		t.Fatalf("a new name: %+v %v", served, err)
	}

	out := s.agentExec(t, agent, "/plug", "agent", "members", "deny", "--reason", "laptop stolen", devFP)
	denied := time.Now() // the command has written the list
	if !strings.Contains(out, `"event":"key.denied"`) {
		t.Errorf("the operator's deny: %s", out)
	}
	select {
	case <-sess.Done():
	case <-time.After(2*time.Second - time.Since(denied)):
		t.Fatal("the denied key's run goes on 2 s after the denial")
	}
	t.Logf("the denied key's run ended %s after the operator's command", time.Since(denied).Round(time.Millisecond))
	var ended *tunnel.EndedError
	if !errors.As(sess.Err(), &ended) || ended.By != "the operator" || !strings.Contains(ended.Reason, "laptop stolen") {
		t.Errorf("the developer reads: %v", sess.Err())
	}
	if _, err := tunnel.Connect(ctx, devCfg); err == nil || !strings.Contains(err.Error(), "denied by the operator") {
		t.Errorf("the denied key's next connection: %v", err)
	}
	clustertest.Eventually(t, 30*time.Second, "the admin lifts the denial", func() error {
		_, _, err := tunnel.ManageMembers(ctx, adminCfg, "undeny", devFP, "")
		return err
	})
	clustertest.Eventually(t, 30*time.Second, "the key let in again", func() error {
		s, err := tunnel.Connect(ctx, devCfg)
		if err == nil {
			s.Close()
		}
		return err
	})
}
