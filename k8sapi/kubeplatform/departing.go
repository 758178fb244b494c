package kubeplatform

import (
	"context"
	"time"

	"plug/k8sapi"
	"plug/tunnel"
)

var _ tunnel.Departing = (*Platform)(nil)

// replacementWait is how long a stopping agent looks for the pod that
// replaces it: the ReplicaSet creates it as soon as this one is deleted,
// usually before the kubelet stops this one.
const replacementWait = 2 * time.Second

// Departing reports whether every agent pod is going away: no pod of the
// agent's (its app.kubernetes.io/name) other than this one is running or
// starting, within replacementWait. That is a Deployment scaled to zero or
// deleted; a rollout or a deleted pod has a replacement. Outside a pod it
// cannot tell, and says "".
func (p *Platform) Departing(ctx context.Context) (string, error) {
	if p.pod == "" {
		return "", nil
	}
	self, err := p.c.Pods(p.ns).Get(ctx, p.pod)
	if err != nil {
		return "", err
	}
	name := self.Metadata.Labels["app.kubernetes.io/name"]
	if name == "" {
		return "", nil
	}
	deadline := time.Now().Add(replacementWait)
	for {
		list, err := p.c.Pods(p.ns).List(ctx, k8sapi.ListOptions{LabelSelector: "app.kubernetes.io/name=" + name})
		if err != nil {
			return "", err
		}
		for _, pod := range list.Items {
			if pod.Metadata.Name != p.pod && pod.Metadata.DeletionTimestamp == nil &&
				pod.Status.Phase != "Failed" && pod.Status.Phase != "Succeeded" {
				return "", nil // another agent pod takes over
			}
		}
		if time.Now().After(deadline) {
			return "every agent pod is stopping: the agent was scaled to zero, or removed, by the cluster's operator", nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
