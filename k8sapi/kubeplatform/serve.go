package kubeplatform

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"plug/k8sapi"
	"plug/tunnel"
)

// errReread asks Serve to read the Service again and start over.
var errReread = errors.New("the Service changed; read it again")

// Serve makes b.Name:b.Port reach this agent on b.Target; see
// tunnel.Platform. A new name becomes a Service of plug's; a deployed
// Service is taken over with a receipt; a name the same run already holds
// (the same run id and the same key: a reconnect, maybe to this replica,
// or another port of it) is extended. A name another run or another key
// holds is refused with a *tunnel.HeldError. A receipt left by a
// holder that is gone is given back first, as the sweep would.
func (p *Platform) Serve(ctx context.Context, b tunnel.Binding) (tunnel.Served, error) {
	if err := tunnel.CheckBinding(b); err != nil {
		return tunnel.Served{}, err
	}
	if err := p.checkNotShadowing(b.Name); err != nil {
		return tunnel.Served{}, err
	}
	if b.Holder.Agent == "" {
		b.Holder.Agent = p.pod
	}
	if b.Holder.Since.IsZero() {
		b.Holder.Since = time.Now()
	}
	p.booting.RLock()
	defer p.booting.RUnlock()
	var err error
	for range 8 {
		var served tunnel.Served
		served, err = p.serveOnce(ctx, b)
		if errors.Is(err, errReread) || k8sapi.IsConflict(err) || k8sapi.IsAlreadyExists(err) {
			continue
		}
		return served, err
	}
	return tunnel.Served{}, fmt.Errorf("serving %s: the Service kept changing under plug; try again: %w", b.Name, err)
}

func (p *Platform) serveOnce(ctx context.Context, b tunnel.Binding) (tunnel.Served, error) {
	svc, err := p.c.Services(p.ns).Get(ctx, b.Name)
	if k8sapi.IsNotFound(err) {
		return p.create(ctx, b)
	}
	if err != nil {
		return tunnel.Served{}, fmt.Errorf("reading the Service %s: %w", b.Name, err)
	}
	r, has, err := receiptOf(svc)
	if err != nil {
		return tunnel.Served{}, tunnel.Refused(b.Name, "%v; plug leaves it alone: choose another name, or remove the annotation by hand once you know who wrote it", err)
	}
	if !has {
		return p.takeOver(ctx, svc, b)
	}
	if r.Holder.tunnel().SameRun(b.Holder) {
		return p.extend(ctx, svc, r, b)
	}
	if why, err := p.abandoned(ctx, svc, r, false); err != nil {
		return tunnel.Served{}, err
	} else if why != "" {
		p.logf("giving %s back before serving it again: %s", b.Name, why)
		if err := p.giveBack(ctx, svc, r); err != nil && !k8sapi.IsConflict(err) {
			return tunnel.Served{}, err
		}
		return tunnel.Served{}, errReread
	}
	return tunnel.Served{}, &tunnel.HeldError{Name: b.Name, Holder: r.Holder.tunnel()}
}

// create makes b.Name a new Service of plug's, answered by this agent.
func (p *Platform) create(ctx context.Context, b tunnel.Binding) (tunnel.Served, error) {
	r := receipt{Holder: holderOf(b.Holder), Pod: p.pod, PodIP: p.ip.String(), Created: true,
		Serves: []servedPort{{Port: b.Port, Target: b.Target, UDP: b.UDP}}}
	svc := &k8sapi.Service{
		TypeMeta: k8sapi.TypeMeta{APIVersion: "v1", Kind: "Service"},
		Metadata: k8sapi.ObjectMeta{
			Name:        b.Name,
			Labels:      map[string]string{LabelManagedBy: ManagedBy},
			Annotations: map[string]string{AnnotationReceipt: r.encode(), AnnotationHeartbeat: heartbeatNow()},
		},
		Spec: k8sapi.ServiceSpec{Type: k8sapi.ServiceClusterIP, Ports: []k8sapi.ServicePort{createdPort(keyOf(b))}},
	}
	created, err := p.c.Services(p.ns).Create(ctx, svc)
	if err != nil {
		if k8sapi.IsInvalid(err) {
			return tunnel.Served{}, tunnel.Refused(b.Name, "the cluster refused the Service %s: %v", b.Name, err)
		}
		return tunnel.Served{}, fmt.Errorf("creating the Service %s: %w", b.Name, err)
	}
	p.forgetDeployed(b.Name)
	if err := p.settleOrUndo(ctx, created, r, b); err != nil {
		return tunnel.Served{}, err
	}
	return tunnel.Served{Detail: fmt.Sprintf("%s:%s is a new name in namespace %s, answered by this run until it ends", b.Name, keyOf(b), p.ns)}, nil
}

// createdPort is k as a port of a Service plug creates. Ports are named
// ("tcp-8080", "udp-8125"), since a Service with several ports must name
// each.
func createdPort(k portKey) k8sapi.ServicePort {
	return k8sapi.ServicePort{Name: fmt.Sprintf("%s-%d", strings.ToLower(k.protocol()), k.Port), Protocol: k.protocol(), Port: k.Port, TargetPort: &k8sapi.IntOrString{Int: k.Port}}
}

// takeOver parks the deployed Service svc and points b.Port at this agent.
func (p *Platform) takeOver(ctx context.Context, svc *k8sapi.Service, b tunnel.Binding) (tunnel.Served, error) {
	if b.NoTakeover {
		return tunnel.Served{}, tunnel.ErrTakeoverNotAllowed
	}
	if err := p.checkNotProtected(svc); err != nil {
		return tunnel.Served{}, err
	}
	if _, err := checkTakeover(svc, b); err != nil {
		return tunnel.Served{}, err
	}
	r := receipt{Holder: holderOf(b.Holder), Pod: p.pod, PodIP: p.ip.String(),
		Serves:   []servedPort{{Port: b.Port, Target: b.Target, UDP: b.UDP}},
		Original: &original{Selector: svc.Spec.Selector, Ports: svc.Spec.Ports}}
	ops := []k8sapi.PatchOp{
		ifVersion(svc),
		setSelector(nil),
		setAnnotations(svc, map[string]string{AnnotationReceipt: r.encode(), AnnotationHeartbeat: heartbeatNow()}),
	}
	labelled := p.keepFromMirror(ctx, svc.Metadata.Name)
	parked, err := p.c.Services(p.ns).JSONPatch(ctx, svc.Metadata.Name, ops)
	if err == nil {
		err = p.settleOrUndo(ctx, parked, r, b)
	} else {
		err = fmt.Errorf("taking over the Service %s: %w", b.Name, err)
	}
	if err != nil {
		if labelled {
			undoCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			p.letMirror(undoCtx, svc.Metadata.Name)
			cancel()
		}
		return tunnel.Served{}, err
	}
	p.warnManaged(svc, b)
	p.recordTakeover(svc, r.Holder)
	return tunnel.Served{TookOver: true, Detail: fmt.Sprintf(
		"%s:%s now reaches this run; the deployed %s (selector %s) is parked until the run ends, its ClusterIP %s kept",
		b.Name, keyOf(b), b.Name, selectorString(r.Original.Selector), svc.Spec.ClusterIP)}, nil
}

// extend serves b on a name the same run of the same key already holds:
// another port of it, or the same port again after the run reconnected
// (maybe to another agent replica, which then becomes the holder: the key
// proves it is the same run).
func (p *Platform) extend(ctx context.Context, svc *k8sapi.Service, r receipt, b tunnel.Binding) (tunnel.Served, error) {
	nr := r
	if r.Pod != p.pod || r.PodIP != p.ip.String() {
		// The run moved here: only what this agent serves is served now.
		nr.Pod, nr.PodIP, nr.Holder.Agent, nr.Serves = p.pod, p.ip.String(), b.Holder.Agent, p.servesHere(b.Name)
	}
	nr = nr.withServed(keyOf(b), b.Target)
	ops := []k8sapi.PatchOp{ifVersion(svc)}
	if r.Created {
		if !slices.ContainsFunc(svc.Spec.Ports, func(sp k8sapi.ServicePort) bool { return keyOfPort(sp) == keyOf(b) }) {
			ops = append(ops, k8sapi.PatchOp{Op: "add", Path: "/spec/ports/-", Value: createdPort(keyOf(b))})
		}
	} else {
		orig := &k8sapi.Service{Metadata: svc.Metadata, Spec: k8sapi.ServiceSpec{Selector: r.Original.Selector, Ports: r.Original.Ports}}
		if _, err := checkTakeover(orig, b); err != nil {
			return tunnel.Served{}, err
		}
	}
	ops = append(ops, setAnnotations(svc, map[string]string{AnnotationReceipt: nr.encode(), AnnotationHeartbeat: heartbeatNow()}))
	updated, err := p.c.Services(p.ns).JSONPatch(ctx, svc.Metadata.Name, ops)
	if err != nil {
		return tunnel.Served{}, fmt.Errorf("serving %s:%s: %w", b.Name, keyOf(b), err)
	}
	if err := p.settleOrUndo(ctx, updated, nr, b); err != nil {
		return tunnel.Served{}, err
	}
	return tunnel.Served{TookOver: !r.Created, Detail: fmt.Sprintf("%s:%s reaches this run", b.Name, keyOf(b))}, nil
}

// settleOrUndo writes the endpoints of svc that r calls for and records
// the binding as held here. When that fails, it gives the name back (or
// leaves the receipt for the sweep if even that fails) and returns why.
func (p *Platform) settleOrUndo(ctx context.Context, svc *k8sapi.Service, r receipt, b tunnel.Binding) error {
	p.hold(b)
	err := p.settle(ctx, svc, r, true)
	if err == nil {
		p.kickGuard()
		return nil
	}
	p.forget(b.Name, keyOf(b))
	undoCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if uerr := p.releaseWithRetry(undoCtx, b); uerr != nil {
		p.logf("%s is left with its receipt for the sweep: %v", b.Name, uerr)
		return fmt.Errorf("serving %s: %w; what was changed carries its receipt, and any agent's sweep gives it back once its heartbeat is %s old", b.Name, err, p.times.Stale)
	}
	return fmt.Errorf("serving %s: %w (what was changed is given back)", b.Name, err)
}

// The JSON patches plug sends a Service it did not create are built of
// operations that apply to any version of it ("add" of a whole field under
// /spec or /metadata, which always exist), led by ifVersion: so the API
// server's answer to a patch based on an outdated read is always Conflict,
// never an error of a path that has changed meanwhile.

// ifVersion is a JSON patch operation that makes the patch apply only to
// the version of svc it was computed from: the API server answers Conflict
// if the object changed since.
func ifVersion(svc *k8sapi.Service) k8sapi.PatchOp {
	return k8sapi.PatchOp{Op: "replace", Path: "/metadata/resourceVersion", Value: svc.Metadata.ResourceVersion}
}

// setSelector is the JSON patch operation making svc's selector sel (none
// when sel is nil).
func setSelector(sel map[string]string) k8sapi.PatchOp {
	return k8sapi.PatchOp{Op: "add", Path: "/spec/selector", Value: sel}
}

// setAnnotations is the JSON patch operation making svc's annotations the
// ones it has, with set added and the keys of drop removed.
func setAnnotations(svc *k8sapi.Service, set map[string]string, drop ...string) k8sapi.PatchOp {
	out := maps.Clone(svc.Metadata.Annotations)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, set)
	for _, k := range drop {
		delete(out, k)
	}
	if len(out) == 0 {
		out = nil // no annotations at all, as a Service that never had any
	}
	return k8sapi.PatchOp{Op: "add", Path: "/metadata/annotations", Value: out}
}
