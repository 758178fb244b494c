package kubeplatform

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"

	"plug/k8sapi"
)

// sliceLabels are the labels of plug's EndpointSlices of Service name.
func sliceLabels(name string) map[string]string {
	return map[string]string{
		k8sapi.LabelServiceName:    name,
		k8sapi.LabelSliceManagedBy: ManagedBy,
		LabelManagedBy:             ManagedBy,
	}
}

// plugSlicesOf selects plug's EndpointSlices of Service name.
func plugSlicesOf(name string) k8sapi.ListOptions {
	return k8sapi.ListOptions{LabelSelector: k8sapi.LabelServiceName + "=" + name + "," + k8sapi.LabelSliceManagedBy + "=" + ManagedBy}
}

// selectorString writes a label selector matching every pair of sel.
func selectorString(sel map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		parts = append(parts, k+"="+sel[k])
	}
	return strings.Join(parts, ",")
}

func addressType(ip string) string {
	if strings.Contains(ip, ":") {
		return "IPv6"
	}
	return "IPv4"
}

func newSlice(svc *k8sapi.Service, name, addrType string) k8sapi.EndpointSlice {
	return k8sapi.EndpointSlice{
		TypeMeta: k8sapi.TypeMeta{APIVersion: k8sapi.KindEndpointSlice.APIVersion(), Kind: k8sapi.KindEndpointSlice.Name},
		Metadata: k8sapi.ObjectMeta{
			Name:   name,
			Labels: sliceLabels(svc.Metadata.Name),
			OwnerReferences: []k8sapi.OwnerReference{{
				APIVersion: "v1", Kind: "Service", Name: svc.Metadata.Name, UID: svc.Metadata.UID,
			}},
		},
		AddressType: addrType,
	}
}

// portName is the name of the port k of a Service's ports ("" when
// unnamed).
func portName(ports []k8sapi.ServicePort, k portKey) string {
	for _, sp := range ports {
		if keyOfPort(sp) == k {
			return sp.Name
		}
	}
	return ""
}

// keyOfPort is the number and protocol of a Service port (SCTP counts as
// neither TCP nor UDP: it has port 0).
func keyOfPort(sp k8sapi.ServicePort) portKey {
	switch protocolOf(sp) {
	case "TCP":
		return portKey{Port: sp.Port}
	case "UDP":
		return portKey{Port: sp.Port, UDP: true}
	}
	return portKey{}
}

// agentSlice is the EndpointSlice that sends the ports the receipt serves
// to the agent pod holding the run.
func (p *Platform) agentSlice(svc *k8sapi.Service, r receipt) k8sapi.EndpointSlice {
	s := newSlice(svc, svc.Metadata.Name+"-plug", addressType(r.PodIP))
	ready := true
	ep := k8sapi.Endpoint{Addresses: []string{r.PodIP}, Conditions: k8sapi.EndpointConditions{Ready: &ready}}
	if r.Pod != "" {
		ep.TargetRef = &k8sapi.ObjectReference{Kind: "Pod", Namespace: p.ns, Name: r.Pod}
	}
	if r.Pod == p.pod {
		ep.NodeName = p.node
	}
	s.Endpoints = []k8sapi.Endpoint{ep}
	for _, served := range r.Serves {
		s.Ports = append(s.Ports, k8sapi.EndpointPort{Name: portName(svc.Spec.Ports, served.key()), Port: served.Target, Protocol: served.key().protocol()})
	}
	return s
}

// unservedPorts are the ports of the original Service the run does not
// serve: they keep answering from the deployed pods.
func unservedPorts(r receipt) []k8sapi.ServicePort {
	if r.Original == nil {
		return nil
	}
	var out []k8sapi.ServicePort
	for _, sp := range r.Original.Ports {
		if k := keyOfPort(sp); k.Port != 0 {
			if _, served := r.serving(k); served {
				continue
			}
		}
		out = append(out, sp)
	}
	return out
}

// resolvePorts maps each of ports to the port pod listens on for it, as
// the EndpointSlice controller would; ok is false when a named target port
// is not declared by the pod.
func resolvePorts(ports []k8sapi.ServicePort, pod k8sapi.Pod) (out []k8sapi.EndpointPort, ok bool) {
	for _, sp := range ports {
		target := targetPort(sp, pod)
		if target == 0 {
			return nil, false
		}
		out = append(out, k8sapi.EndpointPort{Name: sp.Name, Port: target, Protocol: protocolOf(sp)})
	}
	return out, true
}

// targetPort is the port pod listens on for Service port sp, as the
// EndpointSlice controller resolves it; 0 when sp targets a named port the
// pod does not declare.
func targetPort(sp k8sapi.ServicePort, pod k8sapi.Pod) int {
	if sp.TargetPort == nil {
		return sp.Port
	}
	if sp.TargetPort.String != "" {
		return namedPort(pod, sp.TargetPort.String, protocolOf(sp))
	}
	return sp.TargetPort.Int
}

func protocolOf(sp k8sapi.ServicePort) string {
	if sp.Protocol == "" {
		return "TCP"
	}
	return sp.Protocol
}

func namedPort(pod k8sapi.Pod, name, proto string) int {
	for _, c := range pod.Spec.Containers {
		for _, cp := range c.Ports {
			cpProto := cp.Protocol
			if cpProto == "" {
				cpProto = "TCP"
			}
			if cp.Name == name && cpProto == proto {
				return cp.ContainerPort
			}
		}
	}
	return 0
}

// podSlices are the EndpointSlices sending the unserved ports of a
// taken-over Service to the ready pods matching its original selector: one
// slice per distinct mapping of ports (pods may number a named port
// differently).
func (p *Platform) podSlices(svc *k8sapi.Service, r receipt, pods []k8sapi.Pod) []k8sapi.EndpointSlice {
	ports := unservedPorts(r)
	if len(ports) == 0 {
		return nil
	}
	groups := map[string][]k8sapi.Pod{}
	portsOf := map[string][]k8sapi.EndpointPort{}
	for _, pod := range pods {
		if !pod.Ready() || addressType(pod.Status.PodIP) != addressType(r.PodIP) {
			continue
		}
		resolved, ok := resolvePorts(ports, pod)
		if !ok {
			continue
		}
		key := fmt.Sprint(resolved)
		groups[key] = append(groups[key], pod)
		portsOf[key] = resolved
	}
	var out []k8sapi.EndpointSlice
	for i, key := range slices.Sorted(maps.Keys(groups)) {
		name := svc.Metadata.Name + "-plug-pods"
		if i > 0 {
			name = fmt.Sprintf("%s-%d", name, i+1)
		}
		s := newSlice(svc, name, addressType(r.PodIP))
		s.Ports = portsOf[key]
		members := groups[key]
		sort.Slice(members, func(a, b int) bool { return members[a].Metadata.Name < members[b].Metadata.Name })
		for _, pod := range members {
			ready := true
			s.Endpoints = append(s.Endpoints, k8sapi.Endpoint{
				Addresses:  []string{pod.Status.PodIP},
				Conditions: k8sapi.EndpointConditions{Ready: &ready},
				TargetRef:  &k8sapi.ObjectReference{Kind: "Pod", Namespace: p.ns, Name: pod.Metadata.Name, UID: pod.Metadata.UID},
				NodeName:   pod.Spec.NodeName,
			})
		}
		out = append(out, s)
	}
	return out
}

// settle makes the endpoints of svc what its receipt says: plug's slices
// written (the agent's, and for a taken-over Service the deployed pods'
// for the unserved ports), and for a taken-over Service the slices of
// every other writer deleted, so that kube-proxy sends nothing elsewhere.
// The legacy Endpoints go too when first is set or a foreign slice was
// found (the mirroring controller copies them into a slice).
//
// Unless first is set, a slice found missing is written again only while a
// fresh read of the Service still shows r's holder on this agent: a give
// back (by any agent) removes the receipt before it deletes the slices, so
// a settle that read svc before the give back would otherwise write a
// slice again after it, which nothing would then remove until a sweep.
func (p *Platform) settle(ctx context.Context, svc *k8sapi.Service, r receipt, first bool) error {
	p.settling.Lock()
	defer p.settling.Unlock()
	// plug's slices are read while the pods are: neither read depends on
	// the other, and a takeover waits for both before it writes.
	have := make(chan plugSlices, 1)
	go func() { have <- p.plugSlices(ctx, svc.Metadata.Name) }()
	// The deployed pods' slices first: a port given back reaches them
	// before it leaves the agent's slice.
	var want []k8sapi.EndpointSlice
	if !r.Created {
		pods, err := p.c.Pods(p.ns).List(ctx, k8sapi.ListOptions{LabelSelector: selectorString(r.Original.Selector)})
		if err != nil {
			return fmt.Errorf("listing the pods behind %s: %w", svc.Metadata.Name, err)
		}
		want = p.podSlices(svc, r, pods.Items)
		p.noteDeployed(svc.Metadata.Name, *r.Original, pods.Items)
	}
	want = append(want, p.agentSlice(svc, r))
	var mayCreate func() error
	if !first {
		mayCreate = func() error { return p.stillHeld(ctx, svc.Metadata.Name, r) }
	}
	if err := p.syncSlices(ctx, <-have, want, mayCreate); err != nil {
		if errors.Is(err, errGivenBack) {
			return nil // the next tend tells the run
		}
		return err
	}
	if r.Created {
		return nil
	}
	return p.dropForeign(ctx, svc.Metadata.Name, first)
}

// errGivenBack says the name being settled was given back meanwhile.
var errGivenBack = errors.New("given back meanwhile")

// stillHeld reads Service name afresh and returns errGivenBack unless its
// receipt is still held by r's run on this agent.
func (p *Platform) stillHeld(ctx context.Context, name string, r receipt) error {
	svc, err := p.c.Services(p.ns).Get(ctx, name)
	if k8sapi.IsNotFound(err) {
		return errGivenBack
	}
	if err != nil {
		return err
	}
	cur, has, _ := receiptOf(svc)
	if !has || !cur.Holder.tunnel().SameRun(r.Holder.tunnel()) || cur.Pod != p.pod {
		return errGivenBack
	}
	return nil
}

// plugSlices is what a read of plug's EndpointSlices of a Service found,
// or why it failed.
type plugSlices struct {
	items []k8sapi.EndpointSlice
	err   error
}

// plugSlices reads plug's EndpointSlices of Service name.
func (p *Platform) plugSlices(ctx context.Context, name string) plugSlices {
	list, err := p.c.EndpointSlices(p.ns).List(ctx, plugSlicesOf(name))
	if err != nil {
		return plugSlices{err: fmt.Errorf("listing plug's endpoint slices of %s: %w", name, err)}
	}
	return plugSlices{items: list.Items}
}

// syncSlices makes plug's EndpointSlices of a Service, which have found,
// exactly want. Before it writes a slice that does not exist, it calls
// mayCreate (when not nil), once, and stops with its error if there is
// one.
func (p *Platform) syncSlices(ctx context.Context, have plugSlices, want []k8sapi.EndpointSlice, mayCreate func() error) error {
	if have.err != nil {
		return have.err
	}
	slicesAPI := p.c.EndpointSlices(p.ns)
	current := map[string]k8sapi.EndpointSlice{}
	for _, s := range have.items {
		current[s.Metadata.Name] = s
	}
	for _, w := range want {
		cur, exists := current[w.Metadata.Name]
		delete(current, w.Metadata.Name)
		switch {
		case !exists:
			if mayCreate != nil {
				if err := mayCreate(); err != nil {
					return err
				}
				mayCreate = nil
			}
			if _, err := slicesAPI.Create(ctx, &w); err != nil {
				return fmt.Errorf("writing the endpoint slice %s: %w", w.Metadata.Name, err)
			}
		case !sameSlice(cur, w):
			w.Metadata.ResourceVersion = cur.Metadata.ResourceVersion
			if _, err := slicesAPI.Update(ctx, w.Metadata.Name, &w); err != nil {
				return fmt.Errorf("updating the endpoint slice %s: %w", w.Metadata.Name, err)
			}
		}
	}
	for stale := range current {
		if err := slicesAPI.Delete(ctx, stale, nil); err != nil && !k8sapi.IsNotFound(err) {
			return fmt.Errorf("deleting the endpoint slice %s: %w", stale, err)
		}
	}
	return nil
}

func sameSlice(a, b k8sapi.EndpointSlice) bool {
	return a.AddressType == b.AddressType && reflect.DeepEqual(a.Endpoints, b.Endpoints) &&
		reflect.DeepEqual(a.Ports, b.Ports) && reflect.DeepEqual(a.Metadata.Labels, b.Metadata.Labels) &&
		reflect.DeepEqual(a.Metadata.OwnerReferences, b.Metadata.OwnerReferences)
}

// dropForeign deletes the EndpointSlices of Service name that plug did not
// write (the EndpointSlice controller's, the mirroring controller's) and,
// when there were some or endpoints is set, the legacy Endpoints, which the
// mirroring controller would copy into a slice again. kube-proxy merges
// every slice of a Service, so any left would split the traffic between
// the run and the deployed pods.
func (p *Platform) dropForeign(ctx context.Context, name string, endpoints bool) error {
	if !endpoints {
		foreign, err := p.dropForeignSlices(ctx, name)
		if err != nil || foreign == 0 {
			return err
		}
		return p.deleteLegacyEndpoints(ctx, name)
	}
	// The legacy Endpoints go while the slices do: both are routes to the
	// deployed pods, and neither waits for the other.
	legacy := make(chan error, 1)
	go func() { legacy <- p.deleteLegacyEndpoints(ctx, name) }()
	_, err := p.dropForeignSlices(ctx, name)
	if lerr := <-legacy; err == nil {
		err = lerr
	}
	return err
}

// dropForeignSlices deletes the EndpointSlices of Service name that plug
// did not write, and returns how many it found.
func (p *Platform) dropForeignSlices(ctx context.Context, name string) (int, error) {
	slicesAPI := p.c.EndpointSlices(p.ns)
	all, err := slicesAPI.List(ctx, k8sapi.ListOptions{LabelSelector: k8sapi.LabelServiceName + "=" + name})
	if err != nil {
		return 0, fmt.Errorf("listing the endpoint slices of %s: %w", name, err)
	}
	foreign := 0
	for _, s := range all.Items {
		if s.Metadata.Labels[k8sapi.LabelSliceManagedBy] == ManagedBy {
			continue
		}
		foreign++
		pre := &k8sapi.Preconditions{UID: s.Metadata.UID}
		if err := slicesAPI.Delete(ctx, s.Metadata.Name, pre); err != nil && !k8sapi.IsNotFound(err) && !k8sapi.IsConflict(err) {
			return foreign, fmt.Errorf("deleting the endpoint slice %s that %s wrote: %w", s.Metadata.Name, s.Metadata.Labels[k8sapi.LabelSliceManagedBy], err)
		}
	}
	return foreign, nil
}

// deleteLegacyEndpoints deletes the v1 Endpoints of Service name, if any.
func (p *Platform) deleteLegacyEndpoints(ctx context.Context, name string) error {
	if err := p.endpoints().Delete(ctx, name, nil); err != nil && !k8sapi.IsNotFound(err) {
		return fmt.Errorf("deleting the legacy Endpoints of %s: %w", name, err)
	}
	return nil
}

// deletePlugSlices deletes every EndpointSlice plug wrote for Service name.
func (p *Platform) deletePlugSlices(ctx context.Context, name string) error {
	return p.syncSlices(ctx, p.plugSlices(ctx, name), nil, nil)
}
