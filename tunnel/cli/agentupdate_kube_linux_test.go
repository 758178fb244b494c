package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"plug/keys"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// updateKube deploys the manifest's agent, its Role without rule, and a
// profile "kube" with a key of its own reaching it through its Service
// (its pods change), and returns the agent's image, the next image, the
// Service's address and the key's fingerprint. The next image is
// PLUG_TEST_NEXT_IMAGE (an image of another plug version, imported under a
// tag of its own), else the test's image under its fully qualified name,
// which the node has too but the Deployment sees as another image.
func updateKube(t *testing.T, rule string) (k *clustertest.Kube, image, next, serviceIP, fp string) {
	t.Helper()
	k = clustertest.NeedKube(t)
	image = k.NeedPlugImage(t)
	next = os.Getenv("PLUG_TEST_NEXT_IMAGE")
	if next == "" && !strings.Contains(image, "/") {
		next = "docker.io/library/" + image
	}
	if next == "" {
		t.Fatalf("set PLUG_TEST_NEXT_IMAGE: an image of plug other than %s", image)
	}
	k.ApplyAgentManifest(t, image, 0, func(m string) string {
		if !strings.Contains(m, rule) {
			t.Fatalf("the manifest's Role has no rule %q to take away", rule)
		}
		return strings.Replace(m, rule, "", 1)
	})
	serviceIP = strings.TrimSpace(k.Kubectl(t, "get", "service", "plug", "-o", "jsonpath={.spec.clusterIP}"))
	// Ready or not (an agent lacking a right runs need is not): running,
	// with the host key it wrote.
	clustertest.Eventually(t, 90*time.Second, "the agent to run and write its host key", func() error {
		ip, err := k.TryKubectl("get", "pods", "-l", "app.kubernetes.io/name=plug", "-o", "jsonpath={.items[*].status.podIP}")
		if err == nil && strings.TrimSpace(ip) == "" {
			err = fmt.Errorf("no pod with an address")
		}
		var key string
		if err == nil {
			key, err = k.TryKubectl("get", "secret", "plug-state", "-o", "jsonpath={.data.ssh_host_ed25519_key}")
		}
		if err == nil && key == "" {
			err = fmt.Errorf("no host key in plug-state")
		}
		return err
	})
	_, hostKey := deployedAgent(t, k)
	agentProfileAt(t, serviceIP, hostKey)
	eventuallyDial(t, serviceIP+":2222")
	store, err := keys.Home()
	if err != nil {
		t.Fatal(err)
	}
	signer, err := store.Signer("kube")
	if err != nil {
		t.Fatal(err)
	}
	return k, image, next, serviceIP, keys.Fingerprint(signer.PublicKey())
}

// plug update --agent on the real cluster: a key that does not oversee
// the agent is refused; a bad image is rolled back; the next image rolls
// out, and the rule its Role lacks is named with its patch.
func TestUpdateAgentOnKubernetes(t *testing.T) {
	// The Role lacks a rule the agent's features use: the new agent names it.
	const eventsRule = "  - apiGroups: [\"\"]\n    resources: [events]\n    verbs: [create]\n"
	k, image, next, serviceIP, fp := updateKube(t, eventsRule)
	k.Kubectl(t, "rollout", "status", "deployment/plug", "--timeout=120s")
	role := k.Kubectl(t, "get", "role", "plug", "-o", "jsonpath={.rules}")
	deployed := func() string {
		return k.Kubectl(t, "get", "deployment", "plug", "-o", "jsonpath={.spec.template.spec.containers[0].image}")
	}
	podImages := func() string {
		return strings.TrimSpace(k.Kubectl(t, "get", "pods", "-l", "app.kubernetes.io/name=plug", "-o", `jsonpath={range .items[*]}{.spec.containers[0].image}{" "}{end}`))
	}
	_, before, _ := runPlug(t, "doctor", "-p", "kube")

	// A key that does not oversee the agent changes nothing.
	code, _, stderr := runPlug(t, "update", "-p", "kube", "--agent", next)
	if code != ExitFailed || !strings.Contains(stderr, "only a key that oversees this agent moves its image") {
		t.Fatalf("plug update --agent by a key that is no admin: exit %d\n%s", code, stderr)
	}
	if got := deployed(); got != image {
		t.Fatalf("after a refused update the Deployment runs %s", got)
	}
	// Bad input is refused before anything is contacted.
	if code, _, stderr := runPlug(t, "update", "-p", "kube", "--agent", "Plug:Bad Tag"); code != ExitUsage || !strings.Contains(stderr, "is not an image reference") {
		t.Errorf("plug update --agent with a bad reference: exit %d\n%s", code, stderr)
	}

	k.Kubectl(t, "exec", "deploy/plug", "--", "/plug", "agent", "members", "admin", fp)

	// A tag the node does not have, and no registry reachable: the rollout
	// fails, and the previous image is back.
	bad := "plug:absent-" + k.Namespace
	clustertest.Eventually(t, 30*time.Second, "the agent to take the key as an admin", func() error {
		code, _, stderr = runPlug(t, "update", "-p", "kube", "--agent", bad, "--wait", "90s")
		if strings.Contains(stderr, "only a key that oversees") {
			return fmt.Errorf("still refused: %s", stderr)
		}
		return nil
	})
	if code != ExitFailed || !strings.Contains(stderr, "the move to "+bad+" failed and was undone (deployment/plug runs "+image+" again)") ||
		!strings.Contains(stderr, "ErrImage") && !strings.Contains(stderr, "ImagePullBackOff") {
		t.Fatalf("plug update --agent %s: exit %d\n%s", bad, code, stderr)
	}
	t.Logf("plug update --agent %s:\n%s", bad, stderr)
	if got := deployed(); got != image {
		t.Fatalf("after the undo the Deployment runs %s", got)
	}
	clustertest.Eventually(t, 60*time.Second, "the pods of the bad image to go", func() error {
		if got := podImages(); got != image {
			return fmt.Errorf("the agent's pods run %q", got)
		}
		return nil
	})

	eventuallyDial(t, serviceIP+":2222")

	// The next image rolls out; the Role is as it was, and the rule it
	// lacks is named with the command that grants it. (A moment without a
	// ready agent behind the Service, on a busy node, is not what this
	// tests: an update that reached no agent changed nothing, and is
	// asked again.)
	clustertest.Eventually(t, 60*time.Second, "plug update to reach the agent", func() error {
		code, _, stderr = runPlug(t, "update", "-p", "kube", "--agent", next)
		if strings.Contains(stderr, "the agent was not moved: cannot reach the plug agent") {
			return fmt.Errorf("%s", stderr)
		}
		return nil
	})
	if code != 0 || !strings.Contains(stderr, "deployment/plug runs image "+next+" (was "+image+")") || !strings.Contains(stderr, "plug: the new agent plug-") {
		t.Fatalf("plug update --agent %s: exit %d\n%s", next, code, stderr)
	}
	t.Logf("plug update --agent %s:\n%s", next, stderr)
	if !strings.Contains(stderr, "missing right create events: that feature is off") ||
		!strings.Contains(stderr, "kubectl -n "+k.Namespace+` patch role plug --type=json -p '[{"op":"add","path":"/rules/-","value":{"apiGroups":[""],"resources":["events"],"verbs":["create"]}}]'`) {
		t.Errorf("after the move plug does not name the missing rule with its patch:\n%s", stderr)
	}
	if got := deployed(); got != next {
		t.Errorf("the Deployment runs %s", got)
	}
	k.Kubectl(t, "rollout", "status", "deployment/plug", "--timeout=60s")
	clustertest.Eventually(t, 60*time.Second, "only pods of the next image", func() error {
		if got := podImages(); got != next {
			return fmt.Errorf("the agent's pods run %q", got)
		}
		return nil
	})
	if got := k.Kubectl(t, "get", "role", "plug", "-o", "jsonpath={.rules}"); got != role {
		t.Errorf("the Role changed:\nbefore %s\nafter  %s", role, got)
	}
	if os.Getenv("PLUG_TEST_NEXT_IMAGE") != "" {
		_, after, _ := runPlug(t, "doctor", "-p", "kube")
		if versionLine(before) == versionLine(after) {
			t.Errorf("doctor shows the same versions before and after the move to %s: %s", next, versionLine(after))
		}
	}
}

// versionLine is doctor's line about the versions.
func versionLine(doctor string) string {
	for _, l := range strings.Split(doctor, "\n") {
		if strings.Contains(l, "versions: ") {
			return l
		}
	}
	return ""
}

// A new agent lacking a rule that runs need is never ready, and the
// rollout waits for it: plug names the rule with its patch meanwhile, and
// once the admin runs it, the new agent serves and the rollout ends.
func TestUpdateAgentNamesARequiredRuleWhileTheRolloutWaits(t *testing.T) {
	const endpointsRule = "  - apiGroups: [\"\"]\n    resources: [endpoints]\n    verbs: [delete, patch]\n"
	k, image, next, _, fp := updateKube(t, endpointsRule)
	old := strings.TrimSpace(k.Kubectl(t, "get", "pods", "-l", "app.kubernetes.io/name=plug", "-o", "jsonpath={.items[0].metadata.name}"))
	k.Kubectl(t, "exec", "deploy/plug", "--", "/plug", "agent", "members", "admin", fp)
	clustertest.Eventually(t, 30*time.Second, "the agent to take the key as an admin", func() error {
		if _, _, stderr := runPlug(t, "update", "-p", "kube", "--agent", image); !strings.Contains(stderr, "runs image "+image+" already") {
			return fmt.Errorf("plug update --agent %s: %s", image, stderr)
		}
		return nil
	})

	var stderr tunneltest.Buffer
	exit := make(chan int, 1)
	go func() {
		exit <- newCLI(strings.NewReader(""), io.Discard, &stderr).main([]string{"update", "-p", "kube", "--agent", next, "--wait", "150s"})
	}()
	patch := `[{"op":"add","path":"/rules/-","value":{"apiGroups":[""],"resources":["endpoints"],"verbs":["delete"]}}]`
	clustertest.Eventually(t, 90*time.Second, "plug to name the rule the new agent lacks", func() error {
		out := stderr.String()
		for _, para := range strings.Split(out, "plug: agent ") {
			if !strings.HasPrefix(para, old) && strings.Contains(para, "does not serve runs, and is not ready until it does") &&
				strings.Contains(para, "FAIL missing right delete endpoints, which runs need") &&
				strings.Contains(para, "kubectl -n "+k.Namespace+" patch role plug --type=json -p '"+patch+"'") {
				return nil
			}
		}
		return fmt.Errorf("plug update said:\n%s", out)
	})
	k.Kubectl(t, "patch", "role", "plug", "--type=json", "-p", patch)
	select {
	case code := <-exit:
		if code != 0 || !strings.Contains(stderr.String(), "deployment/plug runs image "+next+" (was "+image+")") {
			t.Fatalf("plug update --agent %s: exit %d\n%s", next, code, stderr.String())
		}
	case <-time.After(200 * time.Second):
		t.Fatalf("plug update --agent %s did not end:\n%s", next, stderr.String())
	}
	t.Logf("plug update --agent %s:\n%s", next, stderr.String())
}
