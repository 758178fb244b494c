//go:build unix

package swarmplatform

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"

	"plug/tunnel/clustertest"
)

// A UDP name served from the developer's machine answers a task's
// datagrams on the local swarm: through the relay, the agent deployed as a
// service, and the run's connection, to a UDP echo on this machine; the
// relay is gone after the run.
func TestSwarmServesAUDPPortToATask(t *testing.T) {
	s := needSwarm(t)
	image := agentImage(t)
	name := s.name("stats")
	agentAddr, hostKey := s.deployAgent(t, image)
	sess := connectRun(t, agentAddr, hostKey)

	echo, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { echo.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := echo.ReadFrom(buf)
			if err != nil {
				return
			}
			echo.WriteTo(append([]byte("laptop says "), buf[:n]...), from)
		}
	}()
	if _, err := sess.ServeUDP(context.Background(), name, 8125, echo.LocalAddr().String()); err != nil {
		t.Fatal(err)
	}

	spec := s.workloadSpec(s.name("sender"), "udpsend", "-n", "100000", "-timeout", "1s", name+":8125", "ping")
	spec.Mode = replicated(1)
	id := s.createService(t, spec, 1)
	tasks, err := s.c.Tasks(context.Background(), map[string][]string{"service": {id}, "desired-state": {"running"}})
	if err != nil || len(tasks) == 0 || tasks[0].Status.ContainerStatus == nil {
		t.Fatalf("the sender's container: %v", err)
	}
	container := tasks[0].Status.ContainerStatus.ContainerID
	clustertest.Eventually(t, clustertest.Settle, "the sender's datagrams answered from the laptop", func() error {
		out, err := exec.Command(s.docker, "logs", container).CombinedOutput()
		if err != nil {
			return fmt.Errorf("docker logs: %v: %s", err, out)
		}
		if n := strings.Count(string(out), "laptop says ping"); n < 10 {
			return fmt.Errorf("%d replies so far: %.300s", n, out)
		}
		return nil
	})

	sess.Close()
	clustertest.Eventually(t, clustertest.Settle, "the relay of "+name+" gone", func() error { return s.relayGone(name) })
}
