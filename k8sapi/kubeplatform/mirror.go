package kubeplatform

import (
	"context"

	"plug/k8sapi"
)

// A Service taken over loses its selector, and from that moment the
// EndpointSlice mirroring controller copies the Service's legacy Endpoints
// into a slice of its own: the Endpoints still list the deployed pods until
// the agent deletes them a moment later. kube-proxy merges every slice of a
// Service, and applies changes at most about once a second, so when it
// reads the slices in that moment, part of the callers reach the parked
// pods for a second after the run was told it serves the name (seen on
// Kubernetes 1.37: the mirrored slice came within milliseconds of the
// takeover). The controller mirrors no Endpoints labelled skip-mirror, so
// the agent labels them before it parks the Service.
//
// The label lives no longer than the takeover's next step: the agent
// deletes the Endpoints right after it writes its own slice (dropForeign),
// and the endpoints controller writes them anew, without the label, when
// the Service is given back. A takeover that fails takes the label off
// again. An agent killed between the label and the park leaves it on
// Endpoints whose Service still has its selector, where it changes
// nothing: the controller mirrors only the Endpoints of Services without
// one.

// LabelSkipMirror is the label that keeps the EndpointSlice mirroring
// controller from copying Endpoints into a slice.
const LabelSkipMirror = "endpointslice.kubernetes.io/skip-mirror"

// keepFromMirror labels the Endpoints of Service name skip-mirror, and
// reports whether it did. Endpoints that do not exist need no label. When
// the agent may not patch Endpoints (the right is optional), it says so in
// its log once and takeovers go on without the label.
func (p *Platform) keepFromMirror(ctx context.Context, name string) bool {
	if p.mirrorForbidden.Load() {
		return false
	}
	_, err := p.endpoints().MergePatch(ctx, name, skipMirror("true"))
	switch {
	case err == nil:
		return true
	case k8sapi.IsForbidden(err):
		if !p.mirrorForbidden.Swap(true) {
			p.logf("the agent may not patch Endpoints: a takeover may split its Service's traffic with the parked pods for about a second (deploy/plug-k8s.yaml grants it)")
		}
	case !k8sapi.IsNotFound(err):
		p.logf("%s: labelling its Endpoints %s: %v", name, LabelSkipMirror, err)
	}
	return false
}

// letMirror takes off the label keepFromMirror put on the Endpoints of
// Service name, where they still exist.
func (p *Platform) letMirror(ctx context.Context, name string) {
	if _, err := p.endpoints().MergePatch(ctx, name, skipMirror(nil)); err != nil && !k8sapi.IsNotFound(err) {
		p.logf("%s: taking the label %s off its Endpoints: %v", name, LabelSkipMirror, err)
	}
}

// skipMirror is the merge patch setting the skip-mirror label to value, or
// removing it when value is nil.
func skipMirror(value any) map[string]any {
	return map[string]any{"metadata": map[string]any{"labels": map[string]any{LabelSkipMirror: value}}}
}

// endpoints is the namespace's legacy Endpoints.
func (p *Platform) endpoints() k8sapi.Resource[k8sapi.Endpoints] {
	return k8sapi.Resources[k8sapi.Endpoints](p.c, k8sapi.KindEndpoints, p.ns)
}
