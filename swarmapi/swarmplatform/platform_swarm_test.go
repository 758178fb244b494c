package swarmplatform

import (
	"context"
	"strings"
	"testing"
)

func TestAgentOptionsFromItsTask(t *testing.T) {
	s := needSwarm(t)
	t.Parallel()
	spec := s.workloadSpec(s.name("discover"), "pause")
	spec.Mode = replicated(1)
	id := s.createService(t, spec, 1)
	tasks, err := s.c.Tasks(context.Background(), map[string][]string{"service": {id}, "desired-state": {"running"}})
	if err != nil || len(tasks) != 1 {
		t.Fatal(err)
	}
	opts, err := agentOptions(context.Background(), s.c, tasks[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Service != id || opts.Node != s.node || !strings.HasPrefix(opts.Image, s.workload) ||
		len(opts.Networks) != 1 || opts.Networks[0] != s.network || !strings.HasPrefix(opts.Address, "198.19.") {
		t.Fatalf("options %+v", opts)
	}
	if _, err := agentOptions(context.Background(), s.c, "nosuchtask"); err == nil || !strings.Contains(err.Error(), "names no task") {
		t.Fatalf("unknown task: %v", err)
	}
}
