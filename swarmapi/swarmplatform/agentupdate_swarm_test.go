//go:build unix

package swarmplatform

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/keys"
	"plug/swarmapi"
	"plug/tunnel"
	"plug/tunnel/clustertest"
)

// runningTasks are the tasks of service id that run and are to.
func (s *testSwarm) runningTasks(t *testing.T, id string) []swarmapi.Task {
	t.Helper()
	tasks, err := s.c.Tasks(context.Background(), map[string][]string{"service": {id}, "desired-state": {"running"}})
	if err != nil {
		t.Fatal(err)
	}
	var out []swarmapi.Task
	for _, task := range tasks {
		if task.Running() {
			out = append(out, task)
		}
	}
	return out
}

// plug update --agent on the local swarm, with the agent's service stood
// in for by a workload service of the test's own (start-first needs no
// port published in host mode): the service moves to another image, its
// new task running; an image the engine cannot have fails the update,
// which is undone, the task of the previous image running on, never
// stopped.
func TestUpdateAgentOnTheLocalSwarm(t *testing.T) {
	s := needSwarm(t)
	next := s.workload + "-" + s.prefix
	if out, err := exec.Command(s.docker, "tag", s.workload, next).CombinedOutput(); err != nil {
		t.Fatalf("tagging the workload's image: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command(s.docker, "rmi", next).Run() })
	spec := s.workloadSpec(s.name("agent"), "pause")
	spec.Mode = replicated(1)
	id := s.createService(t, spec, 1)
	p := s.platform(t, "")
	p.opts.Service = id

	r, told, err := updateTo(t, p, next)
	if err != nil || r.Failed != "" || len(r.Pods) != 1 {
		t.Fatalf("UpdateAgent to %s: %+v, %v (told %q)", next, r, err, told)
	}
	svc, err := s.c.Service(bg, id)
	if err != nil || imageName(svc.Spec.TaskTemplate.ContainerSpec.Image) != next || svc.Spec.UpdateConfig != nil {
		t.Errorf("the service after the update: %+v, %v", svc, err)
	}
	running := s.runningTasks(t, id)
	if len(running) != 1 || agentName(running[0]) != r.Pods[0] {
		t.Fatalf("running %+v, the update names %v", running, r.Pods)
	}
	// The name the update gives is the one the new agent goes by: its
	// container's hostname.
	env, err := exec.Command(s.docker, "exec", running[0].Status.ContainerStatus.ContainerID, "/workload", "env").CombinedOutput()
	if err != nil || !strings.Contains(string(env), "HOSTNAME="+r.Pods[0]+"\n") {
		t.Errorf("the new task's hostname is not %s: %v\n%s", r.Pods[0], err, env)
	}

	nosuch := s.workload + "-" + s.prefix + "-nosuch"
	r, told, err = updateTo(t, p, nosuch)
	if err != nil || r.Failed == "" || r.UndoFailed != "" || r.From == "" {
		t.Fatalf("UpdateAgent to %s: %+v, %v (told %q)", nosuch, r, err, told)
	}
	t.Logf("the failed update: %s", r.Failed)
	after := s.runningTasks(t, id)
	if len(after) != 1 || after[0].ID != running[0].ID {
		t.Errorf("after the undo, running %+v; want the task of before, %s, never stopped", after, running[0].ID)
	}
	if svc, err := s.c.Service(bg, id); err != nil || imageName(svc.Spec.TaskTemplate.ContainerSpec.Image) != next || !strings.Contains(svc.Spec.Labels[labelAgentUpdate], "rolled back") {
		t.Errorf("the service after the undo: %+v, %v", svc, err)
	}
}

// gwbridgeAddr is where this host reaches the one running task of service
// id, a container on docker_gwbridge, on port; and the container.
func (s *testSwarm) gwbridgeAddr(t *testing.T, id string, port int) (addr, container string) {
	t.Helper()
	clustertest.Eventually(t, clustertest.Settle, "the task of "+id+" on docker_gwbridge", func() error {
		running := s.runningTasks(t, id)
		if len(running) != 1 || running[0].Status.ContainerStatus == nil {
			return fmt.Errorf("%d tasks run", len(running))
		}
		out, err := exec.Command(s.docker, "network", "inspect", "docker_gwbridge", "--format", "{{json .Containers}}").Output()
		if err != nil {
			return err
		}
		var containers map[string]struct{ IPv4Address string }
		if err := json.Unmarshal(out, &containers); err != nil {
			return err
		}
		c, ok := containers[running[0].Status.ContainerStatus.ContainerID]
		ip, _, _ := strings.Cut(c.IPv4Address, "/")
		if !ok || ip == "" {
			return errors.New("its container is not on docker_gwbridge yet")
		}
		addr, container = net.JoinHostPort(ip, fmt.Sprint(port)), running[0].Status.ContainerStatus.ContainerID
		return nil
	})
	return addr, container
}

// plug update --agent through an agent deployed as a service, as
// deploy/plug-swarm.yml does, publishing no port in host mode (the test
// reaches its task on docker_gwbridge): a member moves it to another
// image, the new agent answering by the name the answer gives; then to an
// image the node does not have, which fails and is undone, the agent of
// before answering on.
func TestSwarmAgentUpdate(t *testing.T) {
	s := needSwarm(t)
	image := agentImage(t)
	ctx := context.Background()
	next := strings.SplitN(image, ":", 2)[0] + ":" + s.prefix
	if out, err := exec.Command(s.docker, "tag", image, next).CombinedOutput(); err != nil {
		t.Fatalf("tagging the agent's image: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command(s.docker, "rmi", next).Run() })
	_, hostKey := s.deployAgent(t, image, "--env=PLUG_ADMISSION=invite")
	agent := s.name("agent")
	svc, err := s.c.Service(ctx, agent)
	if err != nil {
		t.Fatal(err)
	}
	err = s.c.UpdateService(ctx, svc.ID, func(_ *swarmapi.Service, spec swarmapi.RawSpec) error {
		spec.Delete("EndpointSpec") // published in host mode, no port
		return nil
	})
	if err != nil {
		t.Fatalf("publishing no port: %v", err)
	}
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	alice, _ := ssh.NewSignerFromKey(priv)
	addr, container := s.gwbridgeAddr(t, svc.ID, 2222)
	out, err := exec.Command(s.docker, "exec", container, "/plug", "agent", "members", "add", "--user", "alice",
		keys.AuthorizedKey(alice.PublicKey())+" alice@laptop").CombinedOutput()
	if err != nil {
		t.Fatalf("the first member: %v\n%s", err, out)
	}
	cfg := func(addr string) tunnel.ClientConfig {
		return tunnel.ClientConfig{Addr: addr, User: "alice", Signer: alice, HostKey: hostKey}
	}
	clustertest.Eventually(t, 30*time.Second, "alice let in", func() error { _, _, err := tunnel.Who(ctx, cfg(addr)); return err })

	progress := func(line string) { t.Logf("plug: %s", line) }
	res, err := tunnel.UpdateAgent(ctx, cfg(addr), next, time.Minute, progress)
	var lost *tunnel.UpdateLostError
	switch {
	case errors.As(err, &lost):
		t.Logf("the old agent stopped before it answered: %v", err)
	case err != nil || res.Failed != "" || res.To != next || len(res.Pods) != 1:
		t.Fatalf("the update: %+v, %v", res, err)
	}
	clustertest.Eventually(t, clustertest.Settle, "the agent on "+next, func() error {
		svc, err := s.c.Service(ctx, agent)
		if err != nil {
			return err
		}
		running := s.runningTasks(t, svc.ID)
		if len(running) != 1 || imageName(running[0].Spec.ContainerSpec.Image) != next || svc.Spec.UpdateConfig != nil && svc.Spec.UpdateConfig.Order == "start-first" {
			return fmt.Errorf("running %d tasks, update_config %+v", len(running), svc.Spec.UpdateConfig)
		}
		if res.Pods != nil && agentName(running[0]) != res.Pods[0] {
			return fmt.Errorf("the agent running is %s, the answer named %v", agentName(running[0]), res.Pods)
		}
		return nil
	})
	addr, _ = s.gwbridgeAddr(t, svc.ID, 2222)
	var st *tunnel.AgentStatus
	clustertest.Eventually(t, clustertest.Settle, "the new agent's status", func() error {
		d, err := tunnel.Diagnose(ctx, cfg(addr))
		if err == nil && d.Status == nil {
			err = errors.New("no status")
		}
		if err == nil {
			st = d.Status
		}
		return err
	})
	if res.Pods != nil && st.Agent != res.Pods[0] {
		t.Errorf("the new agent says it is %s; the answer named %v", st.Agent, res.Pods)
	}

	nosuch := next + "-nosuch"
	res, err = tunnel.UpdateAgent(ctx, cfg(addr), nosuch, time.Minute, progress)
	if err != nil || !strings.Contains(res.Failed, "No such image") || res.UndoFailed != "" {
		t.Fatalf("the update to %s: %+v, %v", nosuch, res, err)
	}
	if d, err := tunnel.Diagnose(ctx, cfg(addr)); err != nil || d.Status == nil || d.Status.Agent != st.Agent {
		t.Errorf("after the failed update, the agent of before does not answer: %+v, %v", d, err)
	}
}
