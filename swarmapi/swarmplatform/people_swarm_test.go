//go:build unix

package swarmplatform

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"plug/keys"
	"plug/tunnel"
	"plug/tunnel/clustertest"
)

// agentExec runs args in the container of the agent service agent, as
// its operator does, and returns what it printed; a failure ends the test.
func (s *testSwarm) agentExec(t *testing.T, agent string, args ...string) string {
	t.Helper()
	var container string
	clustertest.Eventually(t, 30*time.Second, "the agent's container", func() error {
		out, err := exec.Command(s.docker, "ps", "-q", "--filter", "label=com.docker.swarm.service.name="+agent).Output()
		container = strings.TrimSpace(string(out))
		if err != nil || container == "" {
			return errors.New("no container yet")
		}
		return nil
	})
	out, err := exec.Command(s.docker, append([]string{"exec", container}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker exec %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Acceptance 1 on the real Swarm, with the agent deployed as a swarm
// service with PLUG_ADMISSION=invite: the operator sets the first member
// (alice) with one command; a stranger's key (bob) is refused with the
// command that accepts it; alice accepts it; bob's next run takes the
// deployed web over; alice removes bob's key, and bob's run ends within
// 5 s with the reason, web back as it was; meanwhile plug who shows bob's
// run from its record (a swarm config). Then scaling the agent to zero
// ends a run saying so.
func TestDeployedAdmissionOnSwarm(t *testing.T) {
	s := needSwarm(t)
	image := agentImage(t)
	ctx := context.Background()
	web := s.name("web")
	s.removeRelays(t, web)
	webID := s.createService(t, s.workloadSpec(web, "serve", "-name", "deployed", ":8080"), 1)
	before, _ := s.rawSpec(t, webID)
	caller := s.caller(t)
	addr, hostKey := s.deployAgent(t, image, "--env=PLUG_ADMISSION=invite")
	agent := s.name("agent")
	alice, bob := newSigner(), newSigner()
	bobFP := keys.Fingerprint(bob.PublicKey())

	// The first member: the operator's one command, in the agent's container.
	if out := s.agentExec(t, agent, "/plug", "agent", "members", "add", "--user", "alice",
		keys.AuthorizedKey(alice.PublicKey())+" alice@laptop"); !strings.Contains(out, `"event":"key.accepted"`) {
		t.Fatalf("the operator's first member:\n%s", out)
	}
	aliceCfg := tunnel.ClientConfig{Addr: addr, User: "alice", Signer: alice, HostKey: hostKey}
	clustertest.Eventually(t, 30*time.Second, "alice let in", func() error { _, _, err := tunnel.Who(ctx, aliceCfg); return err })

	bobCfg := tunnel.ClientConfig{Addr: addr, User: "bob", Signer: bob, HostKey: hostKey, Run: tunnel.RunInfo{Serves: true}, Profile: "swarm"}
	if _, err := tunnel.Connect(ctx, bobCfg); err == nil || !strings.Contains(err.Error(), "plug members accept -p PROFILE "+bobFP) {
		t.Fatalf("a stranger's run: %v", err)
	}
	clustertest.Eventually(t, 30*time.Second, "bob accepted", func() error {
		_, _, err := tunnel.ManageMembers(ctx, aliceCfg, "accept", bobFP, "")
		return err
	})
	var sess *tunnel.Session
	clustertest.Eventually(t, 30*time.Second, "bob let in", func() (err error) { sess, err = tunnel.Connect(ctx, bobCfg); return err })
	defer sess.Close()
	local, _ := countingServer(t, "laptop")
	if _, err := sess.Serve(ctx, web, 8080, local); err != nil {
		t.Fatal(err)
	}
	s.answers(t, caller, "http://"+web+":8080/", "laptop", 5)
	// plug who reads the records of runs, swarm configs plug-run-*.
	clustertest.Eventually(t, clustertest.Settle, "bob's run in plug who", func() error {
		runs, all, err := tunnel.Who(ctx, aliceCfg)
		switch {
		case err != nil:
			return err
		case !all || len(runs) != 1 || runs[0].User != "bob" || len(runs[0].Names) != 1 || runs[0].Names[0].Mode != tunnel.ModeParked:
			return fmt.Errorf("who: %+v", runs)
		}
		cfgs, err := s.c.Configs(ctx, map[string][]string{"label": {LabelStore + "=run", LabelService + "=" + agent}})
		if err != nil || len(cfgs) != 1 {
			return fmt.Errorf("the run's config: %v, %v", cfgs, err)
		}
		return nil
	})

	removed := time.Now()
	if _, _, err := tunnel.ManageMembers(ctx, aliceCfg, "remove", bobFP, "left the team"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sess.Done():
	case <-time.After(clustertest.Settle):
		t.Fatal("bob's run goes on after his key was removed")
	}
	t.Logf("bob's run ended %s after the removal", time.Since(removed).Round(time.Millisecond))
	var ended *tunnel.EndedError
	if !errors.As(sess.Err(), &ended) || !strings.Contains(ended.Reason, "removed from the members by alice") || !strings.Contains(ended.Reason, "left the team") {
		t.Errorf("bob reads: %v", sess.Err())
	}
	s.answers(t, caller, "http://"+web+":8080/", "deployed", 5)
	s.sameSpec(t, webID, before)
	clustertest.Eventually(t, clustertest.Settle, "bob's record gone", func() error {
		cfgs, err := s.c.Configs(ctx, map[string][]string{"label": {LabelStore + "=run", LabelService + "=" + agent}})
		if err != nil || len(cfgs) != 0 {
			return fmt.Errorf("records left: %d, %v", len(cfgs), err)
		}
		return nil
	})

	// Scaling the agent to zero ends alice's run, saying so.
	run, err := tunnel.Connect(ctx, tunnel.ClientConfig{Addr: addr, User: "alice", Signer: alice, HostKey: hostKey})
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	if out, err := exec.Command(s.docker, "service", "scale", "-d", agent+"=0").CombinedOutput(); err != nil {
		t.Fatalf("scaling the agent to zero: %v\n%s", err, out)
	}
	select {
	case <-run.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("a run goes on after the agent was scaled to zero")
	}
	if !errors.As(run.Err(), &ended) || ended.Reason != "the agent was scaled to zero by the swarm's operator" {
		t.Errorf("alice reads: %v", run.Err())
	}
}
