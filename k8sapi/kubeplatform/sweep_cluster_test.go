package kubeplatform

import (
	"fmt"
	"testing"
	"time"

	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// agentPod starts a pod standing in for an agent replica and returns its
// name once it runs.
func (k *kube) agentPod(t *testing.T, name string) string {
	t.Helper()
	k.Apply(t, fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  terminationGracePeriodSeconds: 1
  securityContext: %s
  containers:
  - {name: main, image: %s, imagePullPolicy: Never, securityContext: %s, args: [pause]}
`, name, podSecurity, k.WorkloadImage, containerSecurity))
	k.Kubectl(t, "wait", "--for=condition=Ready", "--timeout=90s", "pod/"+name)
	return name
}

// Acceptance 4 (the platform's part): the holder's agent pod deleted
// mid-run → the sweep of the agent that replaces it gives the name back at
// boot; the same pod restarted → it gives back what names it at boot; a
// holder whose heartbeat stopped → given back by any agent.
func TestSweepGivesBackWhatAGoneHolderHeld(t *testing.T) {
	k := needKube(t)
	k.deployWeb(t, 1)
	before := k.snapshot(t, "web")
	old := k.agentPod(t, "agent-old")
	bystander := k.platform(t, k.agentPod(t, "agent-other"), nil, nil)

	// A live holder's receipt is left alone by another agent's sweep.
	holder := k.platform(t, old, nil, nil)
	if _, err := holder.Serve(bg, k.run("run-1", "web", 80)); err != nil {
		t.Fatal(err)
	}
	bystander.sweep(bg, true)
	k.eventuallyAnswered(t, "http://web/", "local")

	// The holder's pod is force-deleted; a new agent boots and sweeps.
	k.Kubectl(t, "delete", "pod", old, "--grace-period=0", "--force")
	newAgent := k.platform(t, k.agentPod(t, "agent-new"), nil, nil)
	tunneltest.Maintain(t, newAgent)
	clustertest.Eventually(t, 30*time.Second, "web given back by the new agent at boot", func() error {
		return k.snapshot(t, "web").sameAs(before)
	})
	k.eventuallyAnswered(t, "http://web/", "deployed")

	// The same pod's agent restarts (its container did): at boot it holds
	// no runs, so it gives back what names it.
	if _, err := newAgent.Serve(bg, k.run("run-2", "web", 80)); err != nil {
		t.Fatal(err)
	}
	restarted := k.platform(t, "agent-new", nil, nil)
	restarted.sweep(bg, true)
	if err := k.snapshot(t, "web").sameAs(before); err != nil {
		t.Fatalf("after the restarted agent's boot sweep: %v", err)
	}

	// A holder still there whose heartbeat stopped: any agent gives it back.
	if _, err := bystander.Serve(bg, k.run("run-3", "fresh", 8080)); err != nil {
		t.Fatal(err)
	}
	bystander.forget("fresh", portKey{}) // as if its agent hung: no more heartbeats
	sweeper := k.platform(t, "agent-new", nil, func(o *Options) { o.Stale = 2 * time.Second })
	clustertest.Eventually(t, clustertest.Settle, "the stale created Service deleted", func() error {
		sweeper.sweep(bg, false)
		if _, err := k.admin.Services(k.Namespace).Get(bg, "fresh"); err == nil {
			return fmt.Errorf("fresh still exists")
		}
		return nil
	})
	if s := k.slicesOf(t, "fresh"); len(s) != 0 {
		t.Errorf("slices of the swept name are left: %v", s)
	}
}
