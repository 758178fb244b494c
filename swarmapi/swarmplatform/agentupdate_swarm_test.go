//go:build unix

package swarmplatform

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"plug/swarmapi"
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
