package kubeplatform

import (
	"context"
	"fmt"
	"slices"
	"time"

	"plug/k8sapi"
	"plug/tunnel"
)

// Release gives b.Name:b.Port (of b's protocol) back (every port of the
// name when b.Port is 0); see tunnel.Platform. When the run holds no other port of the name, a
// Service plug created is deleted and a taken-over one restored exactly
// from its receipt. A name not held on this agent by b's run (the same run
// id and the same key) is left alone. When the API server cannot be
// reached, Release keeps trying until ctx ends (30 s when ctx has no
// deadline); after that Maintain tries again, and the sweep of any agent
// gives the name back once this agent's heartbeat for it, no longer
// renewed, is stale.
func (p *Platform) Release(ctx context.Context, b tunnel.Binding) error {
	if h := p.holdingOf(b.Name); h != nil && h.owner.SameRun(b.Holder) {
		p.forget(b.Name, keyOf(b))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	if err := p.releaseWithRetry(ctx, b); err != nil {
		p.mu.Lock()
		p.pending[b.Name] = b
		p.mu.Unlock()
		return fmt.Errorf("giving %s back: %w; the agent keeps trying, and any agent's sweep gives it back once its heartbeat is %s old", b.Name, err, p.times.Stale)
	}
	return nil
}

// releaseWithRetry releases b, retrying conflicts at once and temporary
// failures until ctx ends.
func (p *Platform) releaseWithRetry(ctx context.Context, b tunnel.Binding) error {
	return retryTemporary(ctx, func() error {
		return k8sapi.RetryOnConflict(ctx, func() error { return p.releaseOnce(ctx, b) })
	})
}

func (p *Platform) releaseOnce(ctx context.Context, b tunnel.Binding) error {
	svc, err := p.c.Services(p.ns).Get(ctx, b.Name)
	if k8sapi.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	r, has, err := receiptOf(svc)
	if err != nil || !has || !r.Holder.tunnel().SameRun(b.Holder) || r.Pod != p.pod {
		return nil // not this agent's to give back
	}
	rest := r.without(keyOf(b))
	if len(rest.Serves) == 0 {
		return p.giveBack(ctx, svc, r)
	}
	ops := []k8sapi.PatchOp{ifVersion(svc), setAnnotations(svc, map[string]string{AnnotationReceipt: rest.encode()})}
	if r.Created {
		// plug created the Service, and every port of it is plug's.
		ports := slices.DeleteFunc(slices.Clone(svc.Spec.Ports), func(sp k8sapi.ServicePort) bool { return keyOfPort(sp) == keyOf(b) })
		ops = append(ops, k8sapi.PatchOp{Op: "add", Path: "/spec/ports", Value: ports})
	}
	updated, err := p.c.Services(p.ns).JSONPatch(ctx, b.Name, ops)
	if err != nil {
		return err
	}
	return p.settle(ctx, updated, rest, false)
}

// giveBack undoes everything receipt r of svc records. A Service plug
// created is deleted: nothing else answers its name. A taken-over one is
// given back make before break, so that its callers see no error:
//
//  1. plug's EndpointSlices point every port of the Service at the ready
//     pods of its original selector, and no longer at the agent (whose
//     listener goes on passing to those pods what kube-proxy still sends
//     it a moment longer);
//  2. the Service gets its selector back and loses plug's annotations, so
//     that it equals what it was;
//  3. once the EndpointSlice controller's slices list those pods, ready
//     (at most Options.HandBack), plug's slices go.
//
// kube-proxy merges every slice of a Service, and sees these changes in
// this order: at each step the name has the ready endpoints it had. The
// writes to the Service apply only to the version of svc given (Conflict
// otherwise), so agents sweeping the same receipt cannot undo each other's
// work; giving back what was already given back changes nothing.
func (p *Platform) giveBack(ctx context.Context, svc *k8sapi.Service, r receipt) error {
	name := svc.Metadata.Name
	if r.Created {
		pre := &k8sapi.Preconditions{UID: svc.Metadata.UID, ResourceVersion: svc.Metadata.ResourceVersion}
		if err := p.c.Services(p.ns).Delete(ctx, name, pre); err != nil && !k8sapi.IsNotFound(err) {
			return fmt.Errorf("deleting the Service %s plug created: %w", name, err)
		}
	} else {
		if r.Original == nil || len(r.Original.Selector) == 0 {
			return fmt.Errorf("the receipt on %s has no original selector to put back; restore it by hand", name)
		}
		ready, err := p.pointAtDeployed(ctx, svc, r)
		if err != nil {
			return err
		}
		ops := []k8sapi.PatchOp{ifVersion(svc), setSelector(r.Original.Selector), setAnnotations(svc, nil, AnnotationReceipt, AnnotationHeartbeat)}
		if _, err := p.c.Services(p.ns).JSONPatch(ctx, name, ops); err != nil {
			return fmt.Errorf("restoring the Service %s: %w", name, err)
		}
		p.awaitControllerSlices(ctx, name, ready)
	}
	if err := p.deletePlugSlices(ctx, name); err != nil {
		return err
	}
	if r.Created {
		p.logf("%s given back: deleted the Service plug created", name)
	} else {
		p.logf("%s given back: the deployed Service is restored", name)
		p.recordRestored(svc, r)
	}
	return nil
}

// pointAtDeployed makes plug's slices of the taken-over svc send every
// port to the ready pods of its original selector, and none to the agent;
// it returns how many endpoints they hold.
func (p *Platform) pointAtDeployed(ctx context.Context, svc *k8sapi.Service, r receipt) (int, error) {
	p.settling.Lock()
	defer p.settling.Unlock()
	name := svc.Metadata.Name
	pods, err := p.c.Pods(p.ns).List(ctx, k8sapi.ListOptions{LabelSelector: selectorString(r.Original.Selector)})
	if err != nil {
		return 0, fmt.Errorf("listing the pods behind %s to give it back: %w", name, err)
	}
	p.noteDeployed(name, *r.Original, pods.Items)
	want := p.podSlices(svc, r.without(portKey{}), pods.Items)
	if err := p.syncSlices(ctx, p.plugSlices(ctx, name), want, nil); err != nil {
		return 0, err
	}
	ready := 0
	for _, s := range want {
		ready = max(ready, len(s.Endpoints))
	}
	return ready, nil
}

// awaitControllerSlices waits, at most Options.HandBack, until the slices
// of Service name that plug did not write hold at least want ready
// endpoints.
func (p *Platform) awaitControllerSlices(ctx context.Context, name string, want int) {
	if want == 0 {
		return
	}
	deadline := time.Now().Add(p.times.HandBack)
	for {
		ready := map[string]bool{}
		all, err := p.c.EndpointSlices(p.ns).List(ctx, k8sapi.ListOptions{LabelSelector: k8sapi.LabelServiceName + "=" + name})
		for _, s := range listed(all, err) {
			if s.Metadata.Labels[k8sapi.LabelSliceManagedBy] == ManagedBy {
				continue
			}
			for _, ep := range s.Endpoints {
				if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
					for _, addr := range ep.Addresses {
						ready[addr] = true
					}
				}
			}
		}
		if err == nil && len(ready) >= want {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.logf("%s: after %s the EndpointSlice controller lists %d of its %d ready pods (%v); plug's endpoints for them go anyway", name, p.times.HandBack, len(ready), want, err)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// retryTemporary calls f until it returns something other than a
// temporary failure or ctx ends, pausing longer each time (up to 5 s).
func retryTemporary(ctx context.Context, f func() error) error {
	pause := 250 * time.Millisecond
	for {
		err := f()
		if !k8sapi.IsTemporary(err) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, 5*time.Second)
	}
}

// listed is the slices of a list that may have failed.
func listed(l *k8sapi.List[k8sapi.EndpointSlice], err error) []k8sapi.EndpointSlice {
	if err != nil || l == nil {
		return nil
	}
	return l.Items
}
