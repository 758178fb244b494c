package kubeplatform

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"plug/k8sapi"
	"plug/k8sapi/k8sapitest"
	"plug/tunnel"
)

const (
	oldImage = "registry.example.com/plug:1.0.0"
	newImage = "registry.example.com/plug:1.1.0"
)

// rolloutKube is a fake namespace with the agent's Deployment "plug", and
// a stand-in for the Deployment controller and the kubelet: each time the
// agent reads the Deployment, a pod of its current image is made when
// there is none, with the status kubelet says that image's pod has; once
// it is ready, the pods of every other image go, as a RollingUpdate does.
type rolloutKube struct {
	*fakeKube
	kubelet func(image string) string // a pod's status, as JSON

	mu   sync.Mutex
	made int
}

func newRolloutKube(t *testing.T, kubelet func(image string) string) *rolloutKube {
	t.Helper()
	k := &rolloutKube{fakeKube: newFakeKube(t), kubelet: kubelet}
	k.create(t, k8sapi.KindDeployment, fmt.Sprintf(`{"metadata": {"name": "plug", "labels": {"app": "plug"}},
		"spec": {"replicas": 1, "selector": {"matchLabels": {"app": "plug"}},
			"template": {"metadata": {"labels": {"app": "plug"}}, "spec": {"containers": [{"name": "plug", "image": %q}]}}}}`, oldImage))
	k.mu.Lock()
	k.step(t)
	k.mu.Unlock()
	// The stand-in's own reads of the Deployment come here too: they pass.
	k.Inject(k8sapitest.Fault{Match: k8sapitest.On("get", "deployments", "plug"), Before: func(k8sapitest.Request) {
		if k.mu.TryLock() {
			defer k.mu.Unlock()
			k.step(t)
		}
	}})
	return k
}

func readyStatus(string) string {
	return `{"phase": "Running", "podIP": "10.1.0.9", "conditions": [{"type": "Ready", "status": "True"}],
		"containerStatuses": [{"name": "plug", "ready": true, "state": {"running": {"startedAt": "2026-12-01T00:00:00Z"}}}]}`
}

// step is what the controllers do once; k.mu is held.
func (k *rolloutKube) step(t *testing.T) {
	d, err := k.admin.Deployments(fakeNS).Get(bg, "plug")
	if err != nil {
		t.Error(err)
		return
	}
	image := d.Spec.Template.Spec.Containers[0].Image
	pods, err := k.admin.Pods(fakeNS).List(bg, k8sapi.ListOptions{LabelSelector: "app=plug"})
	if err != nil {
		t.Error(err)
		return
	}
	var current *k8sapi.Pod
	for i, p := range pods.Items {
		if p.Spec.Containers[0].Image == image {
			current = &pods.Items[i]
		}
	}
	if current == nil {
		k.made++
		name := fmt.Sprintf("plug-%d", k.made)
		k.create(t, k8sapi.KindPod, fmt.Sprintf(`{"metadata": {"name": %q, "labels": {"app": "plug"}},
			"spec": {"containers": [{"name": "plug", "image": %q}]}, "status": %s}`, name, image, k.kubelet(image)))
		current, _ = k.admin.Pods(fakeNS).Get(bg, name)
	}
	if current.Ready() {
		for _, p := range pods.Items {
			if p.Metadata.Name != current.Metadata.Name {
				k.admin.Pods(fakeNS).Delete(bg, p.Metadata.Name, nil)
			}
		}
	}
	// Refused where a test takes the right away from every client.
	k.admin.Deployments(fakeNS).MergePatch(bg, "plug", map[string]any{"status": map[string]any{"updatedReplicas": 1}})
}

// update runs UpdateAgent as agent pod plug-1 of Deployment plug, and
// returns its outcome and the progress it told.
func (k *rolloutKube) update(t *testing.T, image string, wait time.Duration) (tunnel.AgentRollout, []string, error) {
	t.Helper()
	p := k.platform(t, "plug-1", func(o *Options) { o.Deployment = "plug" })
	var lines []string
	r, err := p.UpdateAgent(bg, tunnel.AgentUpdateRequest{Image: image, By: "alice (SHA256:abc)", Wait: wait}, func(l string) { lines = append(lines, l) })
	return r, lines, err
}

// deployed is the Deployment's image and its plug.dev/agent-update note.
func (k *rolloutKube) deployed(t *testing.T) (string, map[string]string) {
	t.Helper()
	d, err := k.admin.Deployments(fakeNS).Get(bg, "plug")
	if err != nil {
		t.Fatal(err)
	}
	var note map[string]string
	if raw, ok := d.Metadata.Annotations[AnnotationAgentUpdate]; ok {
		if err := json.Unmarshal([]byte(raw), &note); err != nil {
			t.Fatalf("%s: %v", AnnotationAgentUpdate, err)
		}
	}
	return d.Spec.Template.Spec.Containers[0].Image, note
}

// The agent moves its Deployment to the image, waits for the new pod to be
// ready, and names it; the Deployment says who moved it from what.
func TestUpdateAgentRollsOutTheImage(t *testing.T) {
	k := newRolloutKube(t, readyStatus)
	r, lines, err := k.update(t, newImage, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if r.Failed != "" || r.From != oldImage || r.To != newImage || !slices.Equal(r.Pods, []string{"plug-2"}) || r.Workload != "deployment/plug" {
		t.Errorf("rollout: %+v", r)
	}
	image, note := k.deployed(t)
	if image != newImage || note["from"] != oldImage || note["to"] != newImage || note["by"] != "alice (SHA256:abc)" || note["ended"] != "" {
		t.Errorf("the Deployment: image %s, %s %v", image, AnnotationAgentUpdate, note)
	}
	if len(lines) == 0 || !strings.Contains(lines[0], "deployment/plug: image "+newImage+" set (was "+oldImage+")") {
		t.Errorf("progress: %q", lines)
	}
}

// A rollout that cannot succeed is undone, whatever the reason, and the
// agent says what failed.
func TestUpdateAgentUndoesAFailedRollout(t *testing.T) {
	for _, tc := range []struct {
		name, status, failed string
	}{
		{"image never pulled", `{"phase": "Pending", "containerStatuses": [{"name": "plug", "state": {"waiting": {"reason": "ErrImageNeverPull", "message": "Container image \"` + newImage + `\" is not present with pull policy of Never"}}}]}`,
			"pod plug-2: ErrImageNeverPull: Container image"},
		{"image pull back-off", `{"phase": "Pending", "containerStatuses": [{"name": "plug", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}}]}`,
			"pod plug-2: ImagePullBackOff: Back-off pulling image"},
		{"crash", `{"phase": "Running", "containerStatuses": [{"name": "plug", "restartCount": 1, "state": {"terminated": {"reason": "Error", "exitCode": 2}}}]}`,
			"pod plug-2: the agent's container crashed (Error, exit code 2; restarted 1 time(s))"},
		{"never ready", `{"phase": "Running", "podIP": "10.1.0.9", "conditions": [{"type": "Ready", "status": "False"}], "containerStatuses": [{"name": "plug", "state": {"running": {"startedAt": "2026-12-01T00:00:00Z"}}}]}`,
			"not ready within 3s: deployment/plug: 0 of 1 pod(s) of image " + newImage + " ready; pod plug-2: running, not ready yet (an agent that lacks a right runs need is never ready: its log names the right, kubectl -n shop logs POD)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newRolloutKube(t, func(image string) string {
				if image == newImage {
					return tc.status
				}
				return readyStatus(image)
			})
			r, lines, err := k.update(t, newImage, 3*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(r.Failed, tc.failed) || r.UndoFailed != "" || r.Pods != nil {
				t.Errorf("rollout: %+v\nwant it failed with %q", r, tc.failed)
			}
			image, note := k.deployed(t)
			if image != oldImage || !strings.HasPrefix(note["ended"], "rolled back: ") {
				t.Errorf("after the undo the Deployment has image %s, %s %v", image, AnnotationAgentUpdate, note)
			}
			if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "setting image "+oldImage+" back") }) {
				t.Errorf("progress: %q", lines)
			}
			pods, _ := k.admin.Pods(fakeNS).List(bg, k8sapi.ListOptions{})
			if len(pods.Items) != 1 || pods.Items[0].Spec.Containers[0].Image != oldImage {
				t.Errorf("after the undo: %d pods", len(pods.Items))
			}
		})
	}
}

// Without the rule on its own Deployment the agent changes nothing, and
// says which rule grants it.
func TestUpdateAgentWithoutTheRightChangesNothing(t *testing.T) {
	k := newRolloutKube(t, readyStatus)
	k.Allow(func(a k8sapi.ResourceAttributes) bool { return a.Verb != "patch" || a.Resource != "deployments" })
	_, _, err := k.update(t, newImage, time.Minute)
	if err == nil || !strings.Contains(err.Error(), "its Role lacks patch deployments.apps/plug; grant it with: kubectl -n shop patch role plug --type=json") ||
		!strings.Contains(err.Error(), `"resourceNames":["plug"]`) {
		t.Fatalf("UpdateAgent without the right: %v", err)
	}
	if image, note := k.deployed(t); image != oldImage || note != nil {
		t.Errorf("the Deployment: image %s, %v", image, note)
	}
}

// The image it runs, or a Deployment whose strategy would stop the agent
// first, is refused before anything changes.
func TestUpdateAgentRefusesWhatItCannotFollow(t *testing.T) {
	k := newRolloutKube(t, readyStatus)
	if _, _, err := k.update(t, oldImage, time.Minute); err == nil || !strings.Contains(err.Error(), "deployment/plug runs image "+oldImage+" already") {
		t.Errorf("the same image: %v", err)
	}
	if _, err := k.admin.Deployments(fakeNS).MergePatch(bg, "plug", map[string]any{"spec": map[string]any{"strategy": map[string]any{"type": "Recreate"}}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := k.update(t, newImage, time.Minute); err == nil || !strings.Contains(err.Error(), "has strategy Recreate") {
		t.Errorf("Recreate: %v", err)
	}
	if image, note := k.deployed(t); image != oldImage || note != nil {
		t.Errorf("the Deployment: image %s, %v", image, note)
	}
	p := k.platform(t, "plug-1", nil)
	if _, err := p.UpdateAgent(bg, tunnel.AgentUpdateRequest{Image: newImage, Wait: time.Minute}, func(string) {}); err == nil || !strings.Contains(err.Error(), "belongs to no Deployment") {
		t.Errorf("no Deployment: %v", err)
	}
}

// The agent's rights include the rule on its own Deployment, by name,
// with the command granting it.
func TestRightsNameTheRuleOnTheAgentsDeployment(t *testing.T) {
	f := newFakeKube(t)
	f.Allow(func(a k8sapi.ResourceAttributes) bool { return a.Resource != "deployments" || a.Name != "plug-x" })
	p := f.platform(t, f.agentPod(t, "plug-x-5d8f-abcde"), func(o *Options) { o.Deployment = "plug-x" })
	rights, err := p.Rights(bg)
	if err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"get", "patch"} {
		i := slices.IndexFunc(rights, func(r tunnel.Right) bool { return r.Rule == verb+" deployments.apps/plug-x" })
		if i < 0 {
			t.Fatalf("no right %s deployments.apps/plug-x in %+v", verb, rights)
		}
		r := rights[i]
		if r.Granted || r.Required || !strings.HasPrefix(r.Feature, "plug update --agent") ||
			!strings.Contains(r.Fix, `"resourceNames":["plug-x"],"resources":["deployments"],"verbs":["`+verb+`"]`) {
			t.Errorf("%+v", r)
		}
	}
}

// The agent's Deployment is its ReplicaSet's name without the pod's
// template hash.
func TestOwnDeploymentFromTheReplicaSet(t *testing.T) {
	yes := true
	for _, tc := range []struct {
		owners []k8sapi.OwnerReference
		hash   string
		want   string
	}{
		{[]k8sapi.OwnerReference{{Kind: "ReplicaSet", Name: "plug-5d8f7c9b4", Controller: &yes}}, "5d8f7c9b4", "plug"},
		{[]k8sapi.OwnerReference{{Kind: "ReplicaSet", Name: "my-plug-agent-77f", Controller: &yes}}, "77f", "my-plug-agent"},
		{[]k8sapi.OwnerReference{{Kind: "ReplicaSet", Name: "plug-5d8f7c9b4"}}, "5d8f7c9b4", ""},
		{[]k8sapi.OwnerReference{{Kind: "StatefulSet", Name: "plug", Controller: &yes}}, "", ""},
		{[]k8sapi.OwnerReference{{Kind: "ReplicaSet", Name: "plug-abc", Controller: &yes}}, "def", ""},
		{nil, "", ""},
	} {
		if got := ownDeployment(tc.owners, tc.hash); got != tc.want {
			t.Errorf("ownDeployment(%+v, %q) = %q, want %q", tc.owners, tc.hash, got, tc.want)
		}
	}
}
