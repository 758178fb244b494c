package swarmplatform

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"plug/tunnel"
	"plug/tunnel/clustertest"
)

// TestWatchNamesFollowsServices watches the names, then creates a service
// with an alias and an exposed port, and removes it.
func TestWatchNamesFollowsServices(t *testing.T) {
	s := needSwarm(t)
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sets := make(chan []tunnel.ClusterName, 100)
	done := make(chan error, 1)
	go func() { done <- s.platform(t, "").WatchNames(ctx, func(n []tunnel.ClusterName) { sets <- n }) }()
	<-sets // the names before

	name := s.name("names")
	spec := s.workloadSpec(name, "serve", ":8080")
	spec.Mode = replicated(1)
	spec.Labels[labelExpose] = "8080"
	spec.TaskTemplate.Networks[0].Aliases = []string{"zz" + name}
	id, err := s.c.CreateService(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	want := tunnel.ClusterName{Name: name, Aliases: []string{"zz" + name}, Ports: []int{8080}}
	waitNames(t, sets, func(names []tunnel.ClusterName) bool {
		return slices.ContainsFunc(names, func(n tunnel.ClusterName) bool { return reflect.DeepEqual(n, want) })
	})
	if err := s.c.RemoveService(ctx, id); err != nil {
		t.Fatal(err)
	}
	waitNames(t, sets, func(names []tunnel.ClusterName) bool {
		return !slices.ContainsFunc(names, func(n tunnel.ClusterName) bool { return n.Name == name })
	})
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("WatchNames ended with %v", err)
	}
}

// waitNames waits for a set of names that ok accepts, as long as dockerd
// may take to tell of the change (clustertest.Settle).
func waitNames(t *testing.T, sets chan []tunnel.ClusterName, ok func([]tunnel.ClusterName) bool) {
	t.Helper()
	deadline := time.After(clustertest.Settle)
	for {
		select {
		case names := <-sets:
			if ok(names) {
				return
			}
		case <-deadline:
			t.Fatalf("the names did not change within %v", clustertest.Settle)
		}
	}
}
