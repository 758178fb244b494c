package kubeplatform

import (
	"os"
	"strings"
	"testing"
	"time"

	"plug/tunnel/clustertest"
)

// agentImage is the plug image the deployed-agent tests run: the cluster's
// (./build.sh image, loaded by up.sh), or PLUG_TEST_AGENT_IMAGE to try
// another one already loaded.
func agentImage(t *testing.T, k *clustertest.Kube) string {
	if img := os.Getenv("PLUG_TEST_AGENT_IMAGE"); img != "" {
		return img
	}
	if k.PlugImage == "" {
		clustertest.Unavailable(t, "the test cluster has no plug image; run ./build.sh image, then testdata/cluster/up.sh again")
	}
	return k.PlugImage
}

// deployManifest applies deploy/plug-k8s.yaml with image (and uid, when
// set), changed by edits: clustertest.Kube.ApplyAgentManifest.
func deployManifest(t *testing.T, k *kube, image string, uid int, edits ...func(string) string) {
	t.Helper()
	k.ApplyAgentManifest(t, image, uid, edits...)
}

// Acceptance 6 and 4 (boot): the manifest's agent runs in a namespace
// enforcing Pod Security restricted, as an arbitrary uid from an
// OpenShift-like range; it starts (its rights check passes), answers SSH,
// stores the shared host key, and at boot gives back a name whose holder
// pod is gone.
func TestDeployedAgentUnderRestrictedPodSecurity(t *testing.T) {
	k := &kube{Kube: clustertest.NeedKube(t, clustertest.Restricted())}
	image := agentImage(t, k.Kube)
	k.setupClients(t)
	k.deployWeb(t, 1)
	before := k.snapshot(t, "web")

	// A run held by an agent pod that no longer exists.
	gone := k.platform(t, "plug-0000000000-gone0", nil, nil)
	if _, err := gone.Serve(bg, k.run("run-1", "web", 80)); err != nil {
		t.Fatal(err)
	}
	// Its guard keeps the controller's slice away until web answers the
	// run; then the agent pod is gone, and nothing guards it any more.
	k.eventuallyAnswered(t, "http://web/", "local")
	gone.forget("web", portKey{})

	deployManifest(t, k, image, 1000650000)
	k.Kubectl(t, "rollout", "status", "deployment/plug", "--timeout=120s")
	pod := strings.TrimSpace(k.Kubectl(t, "get", "pod", "-l", "app.kubernetes.io/name=plug", "-o", "jsonpath={.items[0].metadata.name}"))
	if uid := k.Kubectl(t, "get", "pod", pod, "-o", "jsonpath={.spec.securityContext.runAsUser}"); uid != "1000650000" {
		t.Errorf("the agent pod runs as uid %q", uid)
	}
	clustertest.Eventually(t, 60*time.Second, "the agent's boot sweep gives web back", func() error {
		return k.snapshot(t, "web").sameAs(before)
	})
	k.eventuallyAnswered(t, "http://web/", "deployed")
	logs := k.Kubectl(t, "logs", pod)
	if !strings.Contains(logs, "its agent pod plug-0000000000-gone0 is gone") {
		t.Errorf("the agent's log does not say why it gave web back:\n%s", logs)
	}

	banner, err := k.TryKubectl("exec", "client", "--", "/workload", "tcp", "-timeout", "3s", "plug:2222")
	if err != nil && banner == "" {
		t.Fatalf("reaching the agent's SSH port: %v", err)
	}
	if !strings.HasPrefix(banner, "SSH-2.0-") {
		t.Errorf("plug:2222 answered %q, want an SSH banner", banner)
	}
	key := k.Kubectl(t, "get", "secret", "plug-state", "-o", "jsonpath={.data.ssh_host_ed25519_key}")
	if key == "" {
		t.Errorf("the agent stored no host key in plug-state")
	}
}
