package kubeplatform

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"plug/k8sapi"
	"plug/tunnel"
)

// Event reasons plug writes on a Service it takes over, so that kubectl
// describe svc NAME shows who has it and when it came back.
const (
	EventTakeover = "PlugTakeover" // a run parked the deployed Service
	EventRestored = "PlugRestored" // the deployed Service is back
)

// eventTimeout bounds the writing of one Event: Events are a courtesy to
// whoever looks at the Service, never a reason to hold up a run.
const eventTimeout = 5 * time.Second

// recordEvent writes a Normal Event with reason and message on svc, in the
// background. A failure is logged once per agent (the Role may lack
// "create events"), and changes nothing else.
func (p *Platform) recordEvent(svc *k8sapi.Service, reason, message string) {
	var suffix [8]byte
	rand.Read(suffix[:])
	now := time.Now().UTC().Format(time.RFC3339)
	ev := &k8sapi.ObjectEvent{
		TypeMeta: k8sapi.TypeMeta{APIVersion: "v1", Kind: "Event"},
		Metadata: k8sapi.ObjectMeta{
			Name:   svc.Metadata.Name + "." + hex.EncodeToString(suffix[:]),
			Labels: map[string]string{LabelManagedBy: ManagedBy},
		},
		InvolvedObject: k8sapi.ObjectReference{
			APIVersion: "v1", Kind: "Service", Namespace: p.ns, Name: svc.Metadata.Name, UID: svc.Metadata.UID,
		},
		Reason: reason, Message: message, Type: "Normal",
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		Source:             k8sapi.EventSource{Component: "plug-agent", Host: p.node},
		ReportingComponent: "plug.dev/agent", ReportingInstance: p.pod,
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), eventTimeout)
		defer cancel()
		if _, err := p.c.Events(p.ns).Create(ctx, ev); err != nil && p.eventFailed.CompareAndSwap(false, true) {
			p.logf("cannot write Events on the Services runs take over (%v): kubectl describe svc will not show them; the Role of deploy/plug-k8s.yaml grants create events", err)
		}
	}()
}

// recordTakeover writes the EventTakeover of svc, parked for h.
func (p *Platform) recordTakeover(svc *k8sapi.Service, h holder) {
	p.recordEvent(svc, EventTakeover, fmt.Sprintf("taken over by %s: the deployed pods (selector %s) are parked until the run ends",
		describeHolder(h, p.pod), selectorString(svc.Spec.Selector)))
}

// recordRestored writes the EventRestored of svc, given back from its
// receipt r: by the holder's agent, or by another agent's sweep.
func (p *Platform) recordRestored(svc *k8sapi.Service, r receipt) {
	how := "given back by " + describeHolder(r.Holder, r.Pod)
	if r.Pod != p.pod {
		how = fmt.Sprintf("given back by the sweep of agent pod %s, as %s is gone", p.pod, describeHolder(r.Holder, r.Pod))
	}
	p.recordEvent(svc, EventRestored, fmt.Sprintf("%s: the selector %s is back", how, selectorString(r.Original.Selector)))
}

// describeHolder says who holds a name, without the run's id.
func describeHolder(h holder, pod string) string {
	return fmt.Sprintf("the plug run of %s (%s) on agent pod %s", tunnel.PeerText(h.User), h.Developer, pod)
}
