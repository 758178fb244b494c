package kubeplatform

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"plug/k8sapi"
	"plug/tunnel"
)

// plug update --agent on Kubernetes: the agent patches the image of its
// own container in its own Deployment (the one its pod's ReplicaSet
// belongs to), with the rule "get, patch deployments.apps/NAME" of its
// Role, and follows the rollout by reading the Deployment and listing its
// pods once a second (the pods rule runs need). A rollout that fails is
// undone by setting the previous image back, which the Deployment
// controller rolls out the same way; the old pods are still there (a
// RollingUpdate keeps them until the new ones are ready), so the undo is
// quick. Nothing else of the Deployment changes but the annotation
// AnnotationAgentUpdate, and never the Role.

// AnnotationAgentUpdate, on the agent's Deployment, says who moved it from
// which image to which, when, and how it ended: the last plug update
// --agent, for kubectl describe.
const AnnotationAgentUpdate = "plug.dev/agent-update"

// AgentContainer is the name of the agent's container in deploy/plug-k8s.yaml.
const AgentContainer = "plug"

// updateFeature is what the rule on the agent's own Deployment is for.
const updateFeature = "plug update --agent: move this agent's own Deployment to another image, and undo a rollout that fails"

// rolloutPoll is how often a rollout is looked at.
const rolloutPoll = time.Second

// Waiting reasons of a container that no wait mends: its image cannot be
// had, or it cannot start.
var badWaiting = []string{"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName",
	"CrashLoopBackOff", "CreateContainerConfigError", "CreateContainerError", "RunContainerError"}

// updateRule is the rule of the agent's Role that plug update --agent
// needs: get and patch of the agent's own Deployment, by name.
func (p *Platform) updateRule() rule {
	return rule{group: "apps", resource: "deployments", name: p.deployment, verbs: []string{"get", "patch"}, feature: updateFeature}
}

var _ tunnel.AgentUpdater = (*Platform)(nil)

// UpdateAgent moves the agent's Deployment to req.Image and follows the
// rollout (tunnel.AgentUpdater).
func (p *Platform) UpdateAgent(ctx context.Context, req tunnel.AgentUpdateRequest, progress func(string)) (tunnel.AgentRollout, error) {
	if p.deployment == "" {
		return tunnel.AgentRollout{}, fmt.Errorf("the agent's pod %s belongs to no Deployment it knows of (it was not started by deploy/plug-k8s.yaml's Deployment, or its pod could not be read at boot): move its image the way it was deployed", p.pod)
	}
	workload := "deployment/" + p.deployment
	d, err := p.c.Deployments(p.ns).Get(ctx, p.deployment)
	if err != nil {
		return tunnel.AgentRollout{}, p.updateError("read "+workload, "get", err)
	}
	i, err := agentContainer(d)
	if err != nil {
		return tunnel.AgentRollout{}, err
	}
	r := tunnel.AgentRollout{Workload: workload, From: d.Spec.Template.Spec.Containers[i].Image, To: req.Image}
	switch {
	case r.From == req.Image:
		return r, fmt.Errorf("%s runs image %s already", workload, req.Image)
	case d.Spec.Strategy.Type == "Recreate":
		return r, fmt.Errorf("%s has strategy Recreate: this agent would be stopped before the new one is ready, and could not undo a rollout that fails; give it strategy RollingUpdate (deploy/plug-k8s.yaml's default) or move its image by hand", workload)
	}
	note := map[string]string{"from": r.From, "to": req.Image, "by": req.By, "at": time.Now().UTC().Format(time.RFC3339)}
	gen, err := p.setImage(ctx, d, i, r.From, req.Image, note)
	if err != nil {
		return r, p.updateError("move "+workload+" to image "+req.Image, "patch", err)
	}
	progress(fmt.Sprintf("%s: image %s set (was %s); waiting up to %s for its pods to be ready", workload, req.Image, r.From, req.Wait))
	pods, failed := p.awaitRollout(ctx, gen, d.Spec.Template.Spec.Containers[i].Name, req.Image, req.Wait, progress)
	if failed == "" {
		r.Pods = pods
		return r, nil
	}
	r.Failed = failed
	progress(fmt.Sprintf("the rollout failed: %s; setting image %s back", failed, r.From))
	d, err = p.c.Deployments(p.ns).Get(ctx, p.deployment)
	if err == nil {
		note["ended"] = "rolled back: " + failed
		gen, err = p.setImage(ctx, d, i, req.Image, r.From, note)
	}
	if err != nil {
		r.UndoFailed = fmt.Sprintf("image %s could not be set back (%v): undo it with kubectl -n %s rollout undo %s", r.From, err, p.ns, workload)
		return r, nil
	}
	if _, failed := p.awaitRollout(ctx, gen, d.Spec.Template.Spec.Containers[i].Name, r.From, req.Wait, progress); failed != "" {
		r.UndoFailed = fmt.Sprintf("image %s is set back, but its rollout did not end: %s (kubectl -n %s rollout status %s)", r.From, failed, p.ns, workload)
	}
	return r, nil
}

// updateError says why doing failed, with the rule that grants verb when
// the agent lacks it.
func (p *Platform) updateError(doing, verb string, err error) error {
	if k8sapi.IsForbidden(err) {
		rl := p.updateRule()
		return fmt.Errorf("the agent may not %s: its Role lacks %s; grant it with: %s", doing, rl.text(verb), rl.fix(p.ns, verb))
	}
	return fmt.Errorf("the agent could not %s: %v", doing, err)
}

// agentContainer is the index of the agent's container in d's pod
// template: the one called AgentContainer, or the only one.
func agentContainer(d *k8sapi.Deployment) (int, error) {
	cs := d.Spec.Template.Spec.Containers
	if i := slices.IndexFunc(cs, func(c k8sapi.Container) bool { return c.Name == AgentContainer }); i >= 0 {
		return i, nil
	}
	if len(cs) == 1 {
		return 0, nil
	}
	return 0, fmt.Errorf("deployment/%s has %d containers and none is called %s: plug cannot tell which is the agent's; move its image by hand", d.Metadata.Name, len(cs), AgentContainer)
}

// setImage patches container i of d from image from to image to, only if
// d is as read (its resourceVersion), and notes it in
// AnnotationAgentUpdate. It returns the Deployment's new generation.
func (p *Platform) setImage(ctx context.Context, d *k8sapi.Deployment, i int, from, to string, note map[string]string) (int64, error) {
	text, _ := json.Marshal(note)
	path := fmt.Sprintf("/spec/template/spec/containers/%d", i)
	ops := []k8sapi.PatchOp{
		{Op: "replace", Path: "/metadata/resourceVersion", Value: d.Metadata.ResourceVersion},
		{Op: "test", Path: path + "/image", Value: from},
		{Op: "replace", Path: path + "/image", Value: to},
	}
	if d.Metadata.Annotations == nil {
		ops = append(ops, k8sapi.PatchOp{Op: "add", Path: "/metadata/annotations", Value: map[string]string{AnnotationAgentUpdate: string(text)}})
	} else {
		ops = append(ops, k8sapi.PatchOp{Op: "add", Path: "/metadata/annotations/" + k8sapi.PointerEscape(AnnotationAgentUpdate), Value: string(text)})
	}
	out, err := p.c.Deployments(p.ns).JSONPatch(ctx, d.Metadata.Name, ops)
	switch {
	case k8sapi.IsConflict(err) || k8sapi.IsInvalid(err):
		return 0, fmt.Errorf("deployment/%s changed meanwhile (its image is no longer %s): try again", d.Metadata.Name, from)
	case err != nil:
		return 0, err
	}
	return out.Metadata.Generation, nil
}

// awaitRollout follows the Deployment until its controller acted on
// generation gen and every replica's container runs image and is ready,
// and returns those pods; or until the rollout fails, and says why. Each
// change seen is told to progress.
func (p *Platform) awaitRollout(ctx context.Context, gen int64, container, image string, wait time.Duration, progress func(string)) (pods []string, failed string) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(rolloutPoll)
	defer tick.Stop()
	said := ""
	last := "the Deployment controller did not act on the change"
	for {
		d, err := p.c.Deployments(p.ns).Get(ctx, p.deployment)
		var list *k8sapi.List[k8sapi.Pod]
		if err == nil {
			list, err = p.c.Pods(p.ns).List(ctx, k8sapi.ListOptions{LabelSelector: d.Spec.Selector.String()})
		}
		if err == nil {
			st := rolloutState(d, list.Items, gen, container, image)
			if st.failed != "" {
				return nil, st.failed
			}
			if st.done {
				return st.pods, ""
			}
			last = st.waiting
			if st.waiting != said {
				progress(st.waiting)
				said = st.waiting
			}
		} else if ctx.Err() == nil {
			last = fmt.Sprintf("the agent cannot follow the rollout: %v", err)
		}
		select {
		case <-ctx.Done():
			if strings.Contains(last, "not ready yet") {
				last += " (an agent that lacks a right runs need is never ready: its log names the right, kubectl -n " + p.ns + " logs POD)"
			}
			return nil, fmt.Sprintf("not ready within %s: %s", wait, last)
		case <-tick.C:
		}
	}
}

// rollout is what rolloutState makes of a Deployment and its pods.
type rollout struct {
	done    bool
	pods    []string // the ready pods running the image, once done
	failed  string   // why the rollout cannot succeed
	waiting string   // what it waits for
}

// rolloutState judges the rollout of image in container of d, generation
// gen, from d's status and its pods: done when the controller acted on gen
// and as many pods as d wants run image and are ready; failed when a pod
// of image waits for a reason no wait mends, a container of it ended and
// was restarted, or d's progress deadline passed.
func rolloutState(d *k8sapi.Deployment, pods []k8sapi.Pod, gen int64, container, image string) rollout {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	for _, c := range d.Status.Conditions {
		if c.Type == "Progressing" && c.Reason == "ProgressDeadlineExceeded" && d.Status.ObservedGeneration >= gen {
			return rollout{failed: fmt.Sprintf("deployment/%s exceeded its progress deadline: %s", d.Metadata.Name, tunnel.PeerText(c.Message))}
		}
	}
	if d.Status.ObservedGeneration < gen {
		return rollout{waiting: fmt.Sprintf("deployment/%s: waiting for the Deployment controller", d.Metadata.Name)}
	}
	var ready, states []string
	for _, pod := range pods {
		if pod.Metadata.DeletionTimestamp != nil || !runsImage(pod, container, image) {
			continue
		}
		name := tunnel.PeerText(pod.Metadata.Name)
		cs, _ := containerStatus(pod, container)
		switch {
		case cs.State.Waiting != nil && slices.Contains(badWaiting, cs.State.Waiting.Reason):
			return rollout{failed: fmt.Sprintf("pod %s: %s: %s", name, cs.State.Waiting.Reason, tunnel.PeerText(cs.State.Waiting.Message))}
		case cs.RestartCount > 0:
			why := "it exited"
			if t := cs.State.Terminated; t != nil {
				why = fmt.Sprintf("%s, exit code %d", t.Reason, t.ExitCode)
			}
			return rollout{failed: fmt.Sprintf("pod %s: the agent's container crashed (%s; restarted %d time(s)): kubectl logs %s --previous says why", name, why, cs.RestartCount, name)}
		case pod.Ready():
			ready = append(ready, name)
		case cs.State.Waiting != nil:
			states = append(states, fmt.Sprintf("pod %s: %s", name, cs.State.Waiting.Reason))
		case cs.State.Running != nil:
			states = append(states, fmt.Sprintf("pod %s: running, not ready yet", name))
		default:
			states = append(states, fmt.Sprintf("pod %s: %s", name, orText(pod.Status.Phase, "pending")))
		}
	}
	if int32(len(ready)) >= want && d.Status.UpdatedReplicas >= want {
		slices.Sort(ready)
		return rollout{done: true, pods: ready}
	}
	slices.Sort(states)
	w := fmt.Sprintf("deployment/%s: %d of %d pod(s) of image %s ready", d.Metadata.Name, len(ready), want, image)
	if len(states) > 0 {
		w += "; " + strings.Join(states, "; ")
	}
	return rollout{waiting: w}
}

// runsImage reports whether container of pod is of image.
func runsImage(pod k8sapi.Pod, container, image string) bool {
	i := slices.IndexFunc(pod.Spec.Containers, func(c k8sapi.Container) bool { return c.Name == container })
	return i >= 0 && pod.Spec.Containers[i].Image == image
}

// containerStatus is the status of container in pod.
func containerStatus(pod k8sapi.Pod, container string) (k8sapi.ContainerStatus, bool) {
	i := slices.IndexFunc(pod.Status.ContainerStatuses, func(c k8sapi.ContainerStatus) bool { return c.Name == container })
	if i < 0 {
		return k8sapi.ContainerStatus{}, false
	}
	return pod.Status.ContainerStatuses[i], true
}

func orText(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// ownDeployment is the Deployment a pod owned by ReplicaSet owner, with
// pod-template-hash hash, belongs to: the ReplicaSet's name is the
// Deployment's, a dash and the hash. "" when the pod has no such owner.
func ownDeployment(owners []k8sapi.OwnerReference, hash string) string {
	for _, o := range owners {
		if o.Kind == "ReplicaSet" && o.Controller != nil && *o.Controller && hash != "" {
			if name, ok := strings.CutSuffix(o.Name, "-"+hash); ok && name != "" {
				return name
			}
		}
	}
	return ""
}
