package kubeplatform

import (
	"fmt"
	"strings"

	"plug/k8sapi"
	"plug/tunnel"
)

// checkTakeover refuses a deployed Service plug cannot take over, saying
// why, and returns the Service port that b serves.
func checkTakeover(svc *k8sapi.Service, b tunnel.Binding) (k8sapi.ServicePort, error) {
	name := svc.Metadata.Name
	switch {
	case svc.Spec.Type == k8sapi.ServiceExternalName:
		return k8sapi.ServicePort{}, tunnel.Refused(name, "%s is an ExternalName Service (an alias of %s in DNS, with no address of its own to reroute); plug cannot serve it: choose another name, or point the callers at a name plug serves", name, svc.Spec.ExternalName)
	case svc.Spec.ClusterIP == k8sapi.ClusterIPNone:
		return k8sapi.ServicePort{}, tunnel.Refused(name, "%s is a headless Service (clusterIP: None): callers resolve it to pod addresses and connect straight to them, so there is no Service address plug could reroute; choose another name, or give the Service a ClusterIP", name)
	case len(svc.Spec.Selector) == 0:
		return k8sapi.ServicePort{}, tunnel.Refused(name, "%s has no selector: its endpoints are written by hand or by another controller, which plug would have to overwrite and could not put back; choose another name", name)
	}
	for _, sp := range svc.Spec.Ports {
		if sp.Port != b.Port {
			continue
		}
		if sp.Protocol != "" && sp.Protocol != "TCP" {
			continue
		}
		return sp, nil
	}
	var have []string
	for _, sp := range svc.Spec.Ports {
		proto := sp.Protocol
		if proto == "" {
			proto = "TCP"
		}
		have = append(have, fmt.Sprintf("%d/%s", sp.Port, proto))
	}
	return k8sapi.ServicePort{}, tunnel.Refused(name, "%s exists and answers on %s, not on %d/TCP; serve one of its TCP ports (e.g. -s %s:%d:LOCALPORT)", name, strings.Join(have, ", "), b.Port, name, firstTCP(svc.Spec.Ports, b.Port))
}

// firstTCP is the first TCP port of ports, for an example; fallback if none.
func firstTCP(ports []k8sapi.ServicePort, fallback int) int {
	for _, sp := range ports {
		if sp.Protocol == "" || sp.Protocol == "TCP" {
			return sp.Port
		}
	}
	return fallback
}
