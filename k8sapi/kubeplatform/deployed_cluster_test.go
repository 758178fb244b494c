package kubeplatform

import (
	"fmt"
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
		msg := "the test cluster has no plug image; run ./build.sh image, then testdata/cluster/up.sh again"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return k.PlugImage
}

// deployManifest applies deploy/plug-k8s.yaml as an admin would, with
// image, and with the plug Service as a ClusterIP (the NodePort 32222 is
// the demo's; tests run side by side). uid, when set, is pinned the way
// OpenShift's restricted-v2 assigns one from the namespace's range.
func deployManifest(t *testing.T, k *kube, image string, uid int) {
	t.Helper()
	raw, err := os.ReadFile("../../deploy/plug-k8s.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := strings.Replace(string(raw), "image: plug:dev", "image: "+image, 1)
	m = strings.Replace(m, "  type: NodePort\n", "  type: ClusterIP\n", 1)
	m = strings.Replace(m, "      nodePort: 32222\n", "", 1)
	if uid != 0 {
		m = strings.Replace(m, "        runAsNonRoot: true\n        seccompProfile:",
			fmt.Sprintf("        runAsNonRoot: true\n        runAsUser: %d\n        runAsGroup: 0\n        seccompProfile:", uid), 1)
	}
	k.Apply(t, m)
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
	gone.forget("web", 0)
	k.eventuallyAnswered(t, "http://web/", "local")

	deployManifest(t, k, image, 1000650000)
	k.Kubectl(t, "rollout", "status", "deployment/plug", "--timeout=120s")
	pod := strings.TrimSpace(k.Kubectl(t, "get", "pod", "-l", "app.kubernetes.io/name=plug", "-o", "jsonpath={.items[0].metadata.name}"))
	if uid := k.Kubectl(t, "get", "pod", pod, "-o", "jsonpath={.spec.securityContext.runAsUser}"); uid != "1000650000" {
		t.Errorf("the agent pod runs as uid %q", uid)
	}
	eventually(t, 60*time.Second, "the agent's boot sweep gives web back", func() error {
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
