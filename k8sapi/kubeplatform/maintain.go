package kubeplatform

import (
	"context"
	"fmt"
	"sync"
	"time"

	"plug/k8sapi"
	"plug/tunnel"
)

// Maintain runs until ctx ends; see tunnel.Platform. At once, it sweeps
// the receipts of the namespace, giving back those whose holder is gone —
// including, since this agent has just started, those naming this very pod
// (that sweep and Serve exclude each other, so what a run is served
// meanwhile is never given back by it).
// It keeps the records of runs (runs.go).
// Then it renews the heartbeat of every name held here (every Heartbeat),
// sweeps again (every SweepEvery), and keeps the endpoints of the held
// names as their receipts say, at once on every change of the namespace's
// EndpointSlices and Pods, and of the held Services, it is allowed to
// watch; those changes also prove the held names' paths again.
func (p *Platform) Maintain(ctx context.Context) error {
	p.sweep(ctx, true)
	var watchers sync.WaitGroup
	defer watchers.Wait()
	watchers.Go(func() {
		follow(ctx, p, p.c.EndpointSlices(p.ns), k8sapi.ListOptions{LabelSelector: k8sapi.LabelServiceName}, "endpoint slices", p.sliceChanged)
	})
	watchers.Go(func() { follow(ctx, p, p.c.Pods(p.ns), k8sapi.ListOptions{}, "pods", nil) })
	watchers.Go(func() { follow(ctx, p, p.c.Services(p.ns), k8sapi.ListOptions{}, "services", p.serviceChanges()) })
	watchers.Go(func() { p.tendRecords(ctx) })
	tunnel.Duties{
		Heartbeat:  p.times.Heartbeat,
		SweepEvery: p.times.SweepEvery,
		Beat: func(ctx context.Context) {
			p.retryPending(ctx)
			p.tendAll(ctx, true)
			p.renewVolumes(ctx)
		},
		Sweep:  func(ctx context.Context) { p.sweep(ctx, false) },
		Kick:   p.kick,
		Kicked: func(ctx context.Context) { p.tendAll(ctx, false) },
	}.Run(ctx)
	return nil
}

// follow kicks the guard after each list of res, and passes each change
// to changed (nil: kicks the guard), for as long as ctx lasts and the
// agent may watch it.
func follow[T any](ctx context.Context, p *Platform, res k8sapi.Resource[T], opts k8sapi.ListOptions, what string, changed func(T)) {
	if changed == nil {
		changed = func(T) { p.kickGuard() }
	}
	err := res.Follow(ctx, opts, 10*time.Second, k8sapi.Handler[T]{
		Synced:  func([]T) { p.kickGuard() },
		Changed: func(ev k8sapi.Event[T]) { changed(ev.Object) },
	})
	if ctx.Err() == nil {
		p.logf("not watching %s (%v): the endpoints of served names are checked every %s instead of at once", what, err, p.times.Heartbeat)
	}
}

func (p *Platform) tendAll(ctx context.Context, renew bool) {
	for _, name := range p.heldNames() {
		if err := p.tend(ctx, name, renew); err != nil {
			p.logf("%s: %v", name, err)
		}
	}
}

// tend checks a name held here: still this run's (else the run is told it
// was lost), not changed back by someone else (else the run is told, and
// plug does not fight it), its heartbeat renewed when renew is set, and its
// endpoints as the receipt says.
func (p *Platform) tend(ctx context.Context, name string, renew bool) error {
	h := p.holdingOf(name)
	if h == nil {
		return nil
	}
	svc, err := p.c.Services(p.ns).Get(ctx, name)
	if k8sapi.IsNotFound(err) {
		p.lost(name, fmt.Sprintf("the Service %s was deleted by someone else; the name no longer reaches this run", name))
		return nil
	}
	if err != nil {
		return err
	}
	r, has, _ := receiptOf(svc)
	switch {
	case !has:
		p.lost(name, fmt.Sprintf("%s was given back while this run still served it (its receipt is gone); the name no longer reaches this run", name))
		return nil
	case !r.Holder.tunnel().SameRun(h.owner) && !p.reheld(name, r):
		p.lost(name, fmt.Sprintf("%s was given back while this run still served it, and is now served by %s", name, r.Holder.tunnel()))
		return nil
	case r.Pod != p.pod:
		p.forget(name, portKey{}) // the run reconnected to another agent, which holds it now
		return nil
	case !r.Created && len(svc.Spec.Selector) > 0:
		p.changedBack(ctx, svc, h)
		return nil
	}
	p.takenAgain(name)
	if renew {
		err := k8sapi.RetryOnConflict(ctx, func() error {
			cur, err := p.c.Services(p.ns).Get(ctx, name)
			if err != nil {
				return err
			}
			if cr, ok, _ := receiptOf(cur); !ok || !cr.Holder.tunnel().SameRun(h.owner) || cr.Pod != p.pod {
				return nil // changed hands; the next tend says so
			}
			ops := []k8sapi.PatchOp{ifVersion(cur), setAnnotations(cur, map[string]string{AnnotationHeartbeat: heartbeatNow()})}
			svc, err = p.c.Services(p.ns).JSONPatch(ctx, name, ops)
			return err
		})
		if err != nil {
			return fmt.Errorf("renewing the heartbeat: %w", err)
		}
	}
	return p.settle(ctx, svc, r, false)
}

// retryPending tries again to give back what Release could not.
func (p *Platform) retryPending(ctx context.Context) {
	p.mu.Lock()
	var todo []tunnel.Binding
	for _, b := range p.pending {
		todo = append(todo, b)
	}
	p.mu.Unlock()
	for _, b := range todo {
		if err := k8sapi.RetryOnConflict(ctx, func() error { return p.releaseOnce(ctx, b) }); err != nil {
			p.logf("%s: still cannot give it back: %v", b.Name, err)
			continue
		}
		p.mu.Lock()
		if cur, ok := p.pending[b.Name]; ok && cur.Holder.SameRun(b.Holder) && keyOf(cur) == keyOf(b) {
			delete(p.pending, b.Name)
		}
		p.mu.Unlock()
	}
}

// sweep gives back every receipt of the namespace whose holder is gone,
// and deletes plug's EndpointSlices whose Service carries no receipt. Any
// number of agents may sweep at once: each write applies only to the
// version of the object it was decided on.
func (p *Platform) sweep(ctx context.Context, boot bool) {
	if boot {
		p.booting.Lock()
		defer p.booting.Unlock()
	}
	// Slices are listed before Services: a slice that exists before the
	// Services are read has its receipt written already, unless given back.
	plugSlices, err := p.c.EndpointSlices(p.ns).List(ctx, k8sapi.ListOptions{LabelSelector: k8sapi.LabelSliceManagedBy + "=" + ManagedBy})
	if err != nil {
		p.logf("sweep: listing plug's endpoint slices: %v", err)
		return
	}
	listed, err := k8sapi.Resources[receiptHolder](p.c, k8sapi.KindService, p.ns).List(ctx, k8sapi.ListOptions{Limit: sweepPage})
	if err != nil {
		p.logf("sweep: listing Services: %v", err)
		return
	}
	p.sweepVolumes(ctx, boot)
	withReceipt := map[string]bool{}
	for _, h := range listed.Items {
		if h.Metadata.Annotations.Receipt == nil {
			continue
		}
		name := h.Metadata.Name
		withReceipt[name] = true
		svc, err := p.c.Services(p.ns).Get(ctx, name)
		if err != nil {
			if !k8sapi.IsNotFound(err) {
				p.logf("sweep: reading Service %s: %v", name, err)
			}
			continue
		}
		r, has, err := receiptOf(svc)
		if !has {
			continue // given back since it was listed
		}
		if err != nil {
			p.logf("sweep: %v; left alone", err)
			continue
		}
		if err := p.sweepOne(ctx, svc, r, boot); err != nil {
			p.logf("sweep: %s: %v", name, err)
		}
	}
	for _, s := range plugSlices.Items {
		svcName := s.Metadata.Labels[k8sapi.LabelServiceName]
		if withReceipt[svcName] {
			continue
		}
		err := p.c.EndpointSlices(p.ns).Delete(ctx, s.Metadata.Name, &k8sapi.Preconditions{UID: s.Metadata.UID})
		if err != nil && !k8sapi.IsNotFound(err) {
			p.logf("sweep: deleting the leftover endpoint slice %s: %v", s.Metadata.Name, err)
		} else if err == nil {
			p.sweeps.slices.Add(1)
			p.logf("sweep: deleted the leftover endpoint slice %s of %s", s.Metadata.Name, svcName)
		}
	}
}

// receiptHolder is what a sweep reads of every Service of the namespace:
// its name, and whether it has a receipt (AnnotationReceipt); those that
// have one are then read whole. Every Service of a namespace of thousands
// read whole, every sweep, made the agent's memory jump by some 4 KB a
// Service until it was given back.
type receiptHolder struct {
	Metadata struct {
		Name        string `json:"name"`
		Annotations struct {
			Receipt *string `json:"plug.dev/receipt"` // AnnotationReceipt
		} `json:"annotations"`
	} `json:"metadata"`
}

// sweepPage is how many Services a sweep reads at a time.
const sweepPage = 500

// sweepOne gives svc back if the holder of its receipt r is gone.
func (p *Platform) sweepOne(ctx context.Context, svc *k8sapi.Service, r receipt, boot bool) error {
	if p.holds(svc.Metadata.Name, r) {
		return nil
	}
	why, err := p.abandoned(ctx, svc, r, boot)
	if why == "" || err != nil {
		return err
	}
	p.logf("sweep: giving %s back: %s", svc.Metadata.Name, why)
	err = p.giveBack(ctx, svc, r)
	if k8sapi.IsConflict(err) {
		return nil // changed since it was read: the next sweep decides again
	}
	if err == nil {
		p.sweeps.givenBack.Add(1)
	}
	return err
}

// abandoned says why the holder of receipt r on svc is gone, or "" when it
// may still be alive: its heartbeat is stale, its agent pod no longer
// exists, or (at boot) it names this pod, which has just started and so
// holds no runs.
func (p *Platform) abandoned(ctx context.Context, svc *k8sapi.Service, r receipt, boot bool) (string, error) {
	if boot && p.pod != "" && r.Pod == p.pod {
		return fmt.Sprintf("it names this agent pod %s, which has just started", p.pod), nil
	}
	if age := time.Since(heartbeatOf(svc)); age > p.times.Stale {
		return fmt.Sprintf("its holder's heartbeat is %s old", age.Round(time.Second)), nil
	}
	if r.Pod == "" || r.Pod == p.pod {
		return "", nil
	}
	pod, err := p.c.Pods(p.ns).Get(ctx, r.Pod)
	if k8sapi.IsNotFound(err) {
		return fmt.Sprintf("its agent pod %s is gone", r.Pod), nil
	}
	if err != nil {
		return "", fmt.Errorf("checking its agent pod %s: %w", r.Pod, err)
	}
	if pod.Status.Phase == "Failed" || pod.Status.Phase == "Succeeded" {
		return fmt.Sprintf("its agent pod %s has stopped (%s)", r.Pod, pod.Status.Phase), nil
	}
	return "", nil
}
