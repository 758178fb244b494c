package kubeplatform

import (
	"fmt"
	"slices"
	"strings"

	"plug/k8sapi"
	"plug/tunnel"
)

// ShadowedNames are the names of the cluster's own Services that a run
// does not serve unless the operator allows it (Options.AllowShadowing):
// the API server's (kubernetes; openshift on OpenShift) and the cluster
// DNS's (kube-dns, coredns; dns-default on OpenShift). Those Services
// live in other namespaces; a Service of that name in the agent's
// namespace would answer the pods there that call the cluster's own by
// its short name, the run instead of the API server or the DNS.
var ShadowedNames = []string{"kubernetes", "openshift", "kube-dns", "coredns", "dns-default"}

// checkNotShadowing refuses, before anything changes, to serve one of
// ShadowedNames, unless the operator allows it.
func (p *Platform) checkNotShadowing(name string) error {
	if p.times.AllowShadowing || !slices.Contains(ShadowedNames, name) {
		return nil
	}
	return tunnel.Refused(name, "%s is the name of one of the cluster's own Services (the API server's or the DNS's): a Service %s in namespace %s would answer the pods there that call the cluster's %s by its short name, with this run; choose another name (the cluster's operator allows it with PLUG_ALLOW_SHADOWING=true)", name, name, p.ns, name)
}

// checkNotProtected refuses, before anything changes, a Service no run may
// serve: plug's own (it selects the agent's pod, as the manifest's plug
// Service does: serving it would send the developers who install plug or
// connect to it to a run), a Service plug made for a feature of its own
// (labelled as plug's, with no receipt), and one the cluster admin
// protects (annotation plug.dev/protect: "true").
func (p *Platform) checkNotProtected(svc *k8sapi.Service) error {
	name := svc.Metadata.Name
	switch {
	case p.ownService(svc):
		return tunnel.Refused(name, "%s is plug's own Service (it selects the agent's pod): serving it would send the developers who install plug or connect to it to this run; choose another name", name)
	case svc.Metadata.Labels[LabelManagedBy] == ManagedBy:
		return tunnel.Refused(name, "%s is a Service plug made for a feature of its own (label %s=%s); choose another name", name, LabelManagedBy, ManagedBy)
	case svc.Metadata.Annotations[AnnotationProtect] == "true":
		return tunnel.Refused(name, "%s is protected by the cluster admin (annotation %s: \"true\"), so plug never serves it; choose another name", name, AnnotationProtect)
	}
	return nil
}

// ownService reports whether svc selects the agent's pod.
func (p *Platform) ownService(svc *k8sapi.Service) bool {
	sel := svc.Spec.Selector
	if len(sel) == 0 || len(p.podLabels) == 0 {
		return false
	}
	for k, v := range sel {
		if l, ok := p.podLabels[k]; !ok || l != v {
			return false
		}
	}
	return true
}

// checkTakeover refuses a deployed Service plug cannot take over, saying
// why, and returns the Service port that b serves.
func checkTakeover(svc *k8sapi.Service, b tunnel.Binding) (k8sapi.ServicePort, error) {
	name := svc.Metadata.Name
	switch {
	case svc.Metadata.Labels[LabelVolume] != "":
		return k8sapi.ServicePort{}, tunnel.Refused(name, "%s is the Service of a volume helper plug made for a run (plug --volume); no run may serve it: choose another name", name)
	case svc.Spec.Type == k8sapi.ServiceExternalName:
		return k8sapi.ServicePort{}, tunnel.Refused(name, "%s is an ExternalName Service (an alias of %s in DNS, with no address of its own to reroute); plug cannot serve it: choose another name, or point the callers at a name plug serves", name, svc.Spec.ExternalName)
	case svc.Spec.ClusterIP == k8sapi.ClusterIPNone:
		return k8sapi.ServicePort{}, tunnel.Refused(name, "%s is a headless Service (clusterIP: None): callers resolve it to pod addresses and connect straight to them, so there is no Service address plug could reroute; choose another name, or give the Service a ClusterIP", name)
	case len(svc.Spec.Selector) == 0:
		return k8sapi.ServicePort{}, tunnel.Refused(name, "%s has no selector: its endpoints are written by hand or by another controller, which plug would have to overwrite and could not put back; choose another name", name)
	}
	for _, sp := range svc.Spec.Ports {
		if keyOfPort(sp) == keyOf(b) {
			return sp, nil
		}
	}
	var have []string
	for _, sp := range svc.Spec.Ports {
		proto := sp.Protocol
		if proto == "" {
			proto = "TCP"
		}
		have = append(have, fmt.Sprintf("%d/%s", sp.Port, proto))
	}
	suffix := ""
	if b.UDP {
		suffix = "/udp"
	}
	return k8sapi.ServicePort{}, tunnel.Refused(name, "%s exists and answers on %s, not on %s; serve one of its %s ports (e.g. -s %s:%d:LOCALPORT%s)", name, strings.Join(have, ", "), keyOf(b), keyOf(b).protocol(), name, firstOf(svc.Spec.Ports, keyOf(b)), suffix)
}

// firstOf is the first port of ports of k's protocol, for an example;
// k.Port if none.
func firstOf(ports []k8sapi.ServicePort, k portKey) int {
	for _, sp := range ports {
		if pk := keyOfPort(sp); pk.Port != 0 && pk.UDP == k.UDP {
			return sp.Port
		}
	}
	return k.Port
}
