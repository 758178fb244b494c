package kubeplatform

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"plug/k8sapi"
	"plug/tunnel"
)

// The records of runs (tunnel.RunStore) are Leases, one per run per agent
// pod holding a connection of it: plug who lists them, whichever replica it
// asks; plug end marks each Lease of a run ended, and each holding agent,
// watching its own, ends its part. A Lease names its holder
// (spec.holderIdentity, the agent pod) and when it was last renewed
// (spec.renewTime, every Heartbeat); it is owned by the agent pod, so that
// the garbage collector deletes it with the pod; and one whose renewal is
// older than Stale is ignored, and deleted by any agent's sweep. Nothing
// outlives its agent.
//
//	kubectl get leases -l plug.dev/record=run
const (
	// LabelRecord marks plug's Leases of runs: "run".
	LabelRecord = "plug.dev/record"
	// LabelRecordAgent and LabelRecordRun hold a digest of the agent's
	// and the run's name (label values are too short for a run id).
	LabelRecordAgent = "plug.dev/agent"
	LabelRecordRun   = "plug.dev/run"
	// AnnotationRunRecord holds the record (JSON tunnel.RunRecord).
	AnnotationRunRecord = "plug.dev/run-record"
	// AnnotationRunEnded holds who ended the run and why (JSON
	// tunnel.RunEnd), set by plug end.
	AnnotationRunEnded = "plug.dev/ended"
)

var _ tunnel.RunStore = (*Platform)(nil)

// leaseName is the Lease of run on agent.
func leaseName(agent, run string) string { return "plug-run-" + tunnel.RecordDigest(agent+"/"+run) }

// PutRun writes rec as the Lease of rec.Run on this agent pod; see
// tunnel.RunStore.
func (p *Platform) PutRun(ctx context.Context, rec tunnel.RunRecord) error {
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	name := leaseName(rec.Agent, rec.Run)
	leases := p.c.Leases(p.ns)
	_, err = leases.MergePatch(ctx, name, map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{AnnotationRunRecord: string(raw)}},
		"spec":     map[string]any{"renewTime": k8sapi.NewMicroTime(time.Now())},
	})
	if k8sapi.IsNotFound(err) {
		err = p.createLease(ctx, name, rec, string(raw))
	}
	if err != nil {
		return fmt.Errorf("writing the record of a run (Lease %s): %w", name, err)
	}
	p.records.Add(name)
	return nil
}

func (p *Platform) createLease(ctx context.Context, name string, rec tunnel.RunRecord, raw string) error {
	now := k8sapi.NewMicroTime(time.Now())
	holder := p.pod
	if holder == "" {
		holder = rec.Agent
	}
	lease := &k8sapi.Lease{
		TypeMeta: k8sapi.TypeMeta{APIVersion: k8sapi.KindLease.APIVersion(), Kind: "Lease"},
		Metadata: k8sapi.ObjectMeta{
			Name: name,
			Labels: map[string]string{LabelManagedBy: ManagedBy, LabelRecord: "run",
				LabelRecordAgent: tunnel.RecordDigest(rec.Agent), LabelRecordRun: tunnel.RecordDigest(rec.Run)},
			Annotations: map[string]string{AnnotationRunRecord: raw},
		},
		Spec: k8sapi.LeaseSpec{HolderIdentity: holder, LeaseDurationSeconds: int(p.times.Stale / time.Second),
			AcquireTime: now, RenewTime: now},
	}
	if owner, err := p.ownPod(ctx); err == nil && owner != nil {
		lease.Metadata.OwnerReferences = []k8sapi.OwnerReference{*owner}
	}
	_, err := p.c.Leases(p.ns).Create(ctx, lease)
	if k8sapi.IsAlreadyExists(err) {
		return nil // written meanwhile by this agent's next write
	}
	return err
}

// ownPod is the owner reference to this agent's pod; nil outside a pod.
func (p *Platform) ownPod(ctx context.Context) (*k8sapi.OwnerReference, error) {
	if p.pod == "" {
		return nil, nil
	}
	p.mu.Lock()
	uid := p.podUID
	p.mu.Unlock()
	if uid == "" {
		pod, err := p.c.Pods(p.ns).Get(ctx, p.pod)
		if err != nil {
			return nil, err
		}
		uid = pod.Metadata.UID
		p.mu.Lock()
		p.podUID = uid
		p.mu.Unlock()
	}
	return &k8sapi.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: p.pod, UID: uid}, nil
}

// DeleteRun deletes the Lease of run on agent.
func (p *Platform) DeleteRun(ctx context.Context, agent, run string) error {
	name := leaseName(agent, run)
	p.records.Remove(name)
	err := p.c.Leases(p.ns).Delete(ctx, name, nil)
	if err != nil && !k8sapi.IsNotFound(err) {
		return fmt.Errorf("deleting the record of a run (Lease %s): %w", name, err)
	}
	return nil
}

// Runs returns the records of every agent whose Lease is renewed.
func (p *Platform) Runs(ctx context.Context) ([]tunnel.RunRecord, error) {
	list, err := p.c.Leases(p.ns).List(ctx, k8sapi.ListOptions{LabelSelector: LabelRecord + "=run"})
	if err != nil {
		return nil, fmt.Errorf("listing the records of runs (Leases): %w", err)
	}
	var out []tunnel.RunRecord
	for _, l := range list.Items {
		if rec, ok := p.liveRecord(&l); ok {
			out = append(out, rec)
		}
	}
	return out, nil
}

// liveRecord reads the record of l; false when it is unreadable, being
// deleted, or its holder stopped renewing it.
func (p *Platform) liveRecord(l *k8sapi.Lease) (tunnel.RunRecord, bool) {
	var rec tunnel.RunRecord
	if l.Metadata.DeletionTimestamp != nil || p.stale(l) {
		return rec, false
	}
	if err := json.Unmarshal([]byte(l.Metadata.Annotations[AnnotationRunRecord]), &rec); err != nil || rec.Run == "" {
		return rec, false
	}
	return rec, true
}

// stale reports whether l's holder has not renewed it for Stale.
func (p *Platform) stale(l *k8sapi.Lease) bool {
	return l.Spec.RenewTime == nil || time.Since(l.Spec.RenewTime.Time) > p.times.Stale
}

// EndRun marks every live Lease of run opened by key ended; see
// tunnel.RunStore.
func (p *Platform) EndRun(ctx context.Context, run, key string, end tunnel.RunEnd) (int, error) {
	raw, err := json.Marshal(end)
	if err != nil {
		return 0, err
	}
	leases := p.c.Leases(p.ns)
	list, err := leases.List(ctx, k8sapi.ListOptions{LabelSelector: LabelRecord + "=run," + LabelRecordRun + "=" + tunnel.RecordDigest(run)})
	if err != nil {
		return 0, fmt.Errorf("listing the records of run %s (Leases): %w", run, err)
	}
	live := func(l k8sapi.Lease) (tunnel.RunRecord, bool) { return p.liveRecord(&l) }
	return tunnel.MarkEnded(list.Items, run, key, live, func(l k8sapi.Lease) error {
		_, err := leases.MergePatch(ctx, l.Metadata.Name, map[string]any{
			"metadata": map[string]any{"annotations": map[string]string{AnnotationRunEnded: string(raw)}},
		})
		if err != nil && !k8sapi.IsNotFound(err) {
			return fmt.Errorf("marking the Lease %s ended: %w", l.Metadata.Name, err)
		}
		return nil
	})
}

// WatchEnded follows agent's Leases and passes on each one marked ended,
// once; see tunnel.RunStore.
func (p *Platform) WatchEnded(ctx context.Context, agent string, ended func(rec tunnel.RunRecord, end tunnel.RunEnd)) error {
	told := map[string]bool{} // Lease names already passed on
	check := func(l *k8sapi.Lease) {
		raw, marked := l.Metadata.Annotations[AnnotationRunEnded]
		if !marked || told[l.Metadata.Name] {
			return
		}
		var rec tunnel.RunRecord
		var end tunnel.RunEnd
		if json.Unmarshal([]byte(l.Metadata.Annotations[AnnotationRunRecord]), &rec) != nil || json.Unmarshal([]byte(raw), &end) != nil {
			return
		}
		told[l.Metadata.Name] = true
		ended(rec, end)
	}
	opts := k8sapi.ListOptions{LabelSelector: LabelRecord + "=run," + LabelRecordAgent + "=" + tunnel.RecordDigest(agent)}
	return p.c.Leases(p.ns).Follow(ctx, opts, 10*time.Second, k8sapi.Handler[k8sapi.Lease]{
		Synced: func(items []k8sapi.Lease) {
			for i := range items {
				check(&items[i])
			}
		},
		Changed: func(ev k8sapi.Event[k8sapi.Lease]) {
			if ev.Type == k8sapi.Deleted {
				delete(told, ev.Object.Metadata.Name)
				return
			}
			check(&ev.Object)
		},
	})
}

// tendRecords keeps the Leases of runs until ctx ends: at once it deletes
// those a former process in this pod left; every Heartbeat it renews this
// agent's; with every sweep it deletes any agent's that are stale.
func (p *Platform) tendRecords(ctx context.Context) {
	p.sweepRecords(ctx, true)
	tunnel.Duties{
		Heartbeat:  p.times.Heartbeat,
		SweepEvery: p.times.SweepEvery,
		Beat:       p.renewRecords,
		Sweep:      func(ctx context.Context) { p.sweepRecords(ctx, false) },
	}.Run(ctx)
}

// renewRecords renews the Leases this agent wrote.
func (p *Platform) renewRecords(ctx context.Context) {
	for _, name := range p.records.Names() {
		_, err := p.c.Leases(p.ns).MergePatch(ctx, name, map[string]any{
			"spec": map[string]any{"renewTime": k8sapi.NewMicroTime(time.Now())},
		})
		if err != nil && !k8sapi.IsNotFound(err) {
			p.logf("renewing the record of a run (Lease %s): %v", name, err)
		}
	}
}

// sweepRecords deletes the Leases of runs whose holder stopped renewing
// them, and at boot those naming this pod, which has just started.
func (p *Platform) sweepRecords(ctx context.Context, boot bool) {
	list, err := p.c.Leases(p.ns).List(ctx, k8sapi.ListOptions{LabelSelector: LabelRecord + "=run"})
	if err != nil {
		return // the agent logs that it cannot keep records when it writes one
	}
	for _, l := range list.Items {
		mine := boot && p.pod != "" && l.Spec.HolderIdentity == p.pod
		if !mine && !p.stale(&l) {
			continue
		}
		pre := &k8sapi.Preconditions{UID: l.Metadata.UID, ResourceVersion: l.Metadata.ResourceVersion}
		if err := p.c.Leases(p.ns).Delete(ctx, l.Metadata.Name, pre); err == nil {
			p.logf("sweep: deleted the record of a run whose agent %s is gone (Lease %s)", l.Spec.HolderIdentity, l.Metadata.Name)
		}
	}
}
