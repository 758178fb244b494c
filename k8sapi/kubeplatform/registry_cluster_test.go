package kubeplatform

import (
	"strings"
	"testing"

	"plug/tunnel/clustertest"
)

// The manifest's agent runs from plug's image pulled by its tag from the
// node's registry, as on any cluster with a registry (up.sh pushes the
// image index there; imagePullPolicy Always, so that no image imported
// into containerd stands in for it), and a run serves web through it.
func TestDeployedAgentFromTheRegistryServesAName(t *testing.T) {
	k := &kube{Kube: clustertest.NeedKube(t, clustertest.Restricted())}
	image := k.RegistryImage
	if image == "" {
		clustertest.Unavailable(t, "the test cluster's registry holds no plug image; run ./build.sh image, then testdata/cluster/up.sh again")
	}
	k.setupClients(t)
	k.deployWeb(t, 1)
	a := deployAgent(t, k, image, func(m string) string {
		return strings.Replace(m, "imagePullPolicy: IfNotPresent", "imagePullPolicy: Always", 1)
	})
	pod := a.pod(t)
	status := k.Kubectl(t, "get", "pod", pod, "-o", "jsonpath={.spec.containers[0].image} {.status.containerStatuses[0].imageID}")
	repo := image[:strings.LastIndex(image, ":")]
	if want := image + " " + repo + "@sha256:"; !strings.HasPrefix(status, want) {
		t.Errorf("the agent pod runs %q, want the image by tag, pulled from the registry (%q…)", status, want)
	}
	if events := k.Kubectl(t, "get", "events", "--field-selector", "involvedObject.name="+pod, "-o", "jsonpath={.items[*].message}"); !strings.Contains(events, "Successfully pulled image \""+image+"\"") {
		t.Errorf("the kubelet did not pull %s for the agent: %s", image, events)
	}
	a.serveWeb(t, a.connect(t))
}
