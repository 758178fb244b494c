//go:build unix

package swarmplatform

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/tunnel"
	"plug/tunnel/clustertest"
)

// A run reaches, by name, a service on a second overlay network the agent
// joined, not only on the first.
func TestDeployedAgentReachesEveryNetworkItJoined(t *testing.T) {
	s := needSwarm(t)
	image := agentImage(t)
	ctx := context.Background()
	second := s.name("second")
	if out, err := exec.Command(s.docker, "network", "create", "-d", "overlay", second).CombinedOutput(); err != nil {
		t.Fatalf("creating the network %s: %v %s", second, err, out)
	}
	name := s.name("billing")
	t.Cleanup(func() {
		exec.Command(s.docker, "service", "rm", name, s.name("agent")).Run()
		clustertest.Eventually(t, 30*time.Second, "the network "+second+" removed, once its tasks are gone", func() error {
			if out, err := exec.Command(s.docker, "network", "rm", second).CombinedOutput(); err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
	})
	nw, err := s.c.Network(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	spec := s.workloadSpec(name, "serve", "-name", "billing", ":8080")
	spec.Mode = replicated(1)
	spec.Labels[labelExpose] = "8080"
	spec.TaskTemplate.Networks[0].Target = nw.ID
	s.createService(t, spec, 1)
	addr, hostKey := s.deployAgent(t, image, "--network="+second)

	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := ssh.NewSignerFromKey(priv)
	sess, err := tunnel.Connect(ctx, tunnel.ClientConfig{Addr: addr, User: "dev", Signer: signer, HostKey: hostKey})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	clustertest.Eventually(t, 30*time.Second, name+":8080 answered through the agent", func() error {
		cat, _, _ := sess.Catalog()
		known := false
		for _, n := range cat.Names {
			known = known || n.Name == name
		}
		if !known {
			return fmt.Errorf("the run's names are %v", cat.Names)
		}
		dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		c, err := sess.Dial(dctx, name+":8080")
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(3 * time.Second))
		io.WriteString(c, "GET / HTTP/1.0\r\nHost: "+name+"\r\n\r\n")
		b, _ := io.ReadAll(c)
		if !strings.Contains(string(b), "billing") {
			return fmt.Errorf("it answered %q", b)
		}
		return nil
	})
}
