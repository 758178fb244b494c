package kubeplatform

import (
	"context"
	"fmt"
	"slices"
	"time"

	"plug/k8sapi"
	"plug/tunnel"
)

// Release gives b.Name:b.Port back (every port of the name when b.Port is
// 0); see tunnel.Platform. When the run holds no other port of the name, a
// Service plug created is deleted and a taken-over one restored exactly
// from its receipt. A name not held by b's run on this agent is left
// alone. When the API server cannot be reached, Release keeps trying until
// ctx ends (30 s when ctx has no deadline); after that Maintain tries
// again, and the sweep of any agent gives the name back once this agent's
// heartbeat for it, no longer renewed, is stale.
func (p *Platform) Release(ctx context.Context, b tunnel.Binding) error {
	p.forget(b.Name, b.Port)
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
	if err != nil || !has || r.Holder.Run != b.Holder.Run || r.Pod != p.pod {
		return nil // not this agent's to give back
	}
	rest := r.without(b.Port)
	if len(rest.Serves) == 0 {
		return p.giveBack(ctx, svc, r)
	}
	ops := []k8sapi.PatchOp{ifVersion(svc), setAnnotations(svc, map[string]string{AnnotationReceipt: rest.encode()})}
	if r.Created {
		// plug created the Service, and every port of it is plug's.
		ports := slices.DeleteFunc(slices.Clone(svc.Spec.Ports), func(sp k8sapi.ServicePort) bool { return sp.Port == b.Port })
		ops = append(ops, k8sapi.PatchOp{Op: "add", Path: "/spec/ports", Value: ports})
	}
	updated, err := p.c.Services(p.ns).JSONPatch(ctx, b.Name, ops)
	if err != nil {
		return err
	}
	return p.settle(ctx, updated, rest, false)
}

// giveBack undoes everything receipt r of svc records: a Service plug
// created is deleted; a taken-over one gets its selector back and loses
// plug's annotations, so that it equals what it was. plug's EndpointSlices
// go last, so the name is never left without endpoints in between. The
// writes apply only to the version of svc given (Conflict otherwise), so
// agents sweeping the same receipt cannot undo each other's work; giving
// back what was already given back changes nothing.
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
		ops := []k8sapi.PatchOp{ifVersion(svc), setSelector(r.Original.Selector), setAnnotations(svc, nil, AnnotationReceipt, AnnotationHeartbeat)}
		if _, err := p.c.Services(p.ns).JSONPatch(ctx, name, ops); err != nil {
			return fmt.Errorf("restoring the Service %s: %w", name, err)
		}
	}
	if err := p.deletePlugSlices(ctx, name); err != nil {
		return err
	}
	if r.Created {
		p.logf("%s given back: deleted the Service plug created", name)
	} else {
		p.logf("%s given back: the deployed Service is restored", name)
	}
	return nil
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
