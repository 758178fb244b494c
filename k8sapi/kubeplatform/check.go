package kubeplatform

import (
	"fmt"
	"regexp"
	"strings"

	"plug/k8sapi"
	"plug/tunnel"
)

// dns1035 is a Service name: a DNS label starting with a letter.
var dns1035 = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)

// RefusedError is a request plug refuses before changing anything: a bad
// name or port, or a Service plug cannot serve. Text says why and what to
// do instead.
type RefusedError struct {
	Name string
	Text string
}

func (e *RefusedError) Error() string { return e.Text }

func refused(name, format string, args ...any) error {
	return &RefusedError{Name: name, Text: fmt.Sprintf(format, args...)}
}

// checkBinding refuses a binding whose name or ports Kubernetes would
// refuse, saying what a valid one looks like.
func checkBinding(b tunnel.Binding) error {
	if len(b.Name) > 63 || !dns1035.MatchString(b.Name) {
		return refused(b.Name, "%q is not a valid Service name: use at most 63 lower-case letters, digits and '-', starting with a letter and ending with a letter or digit (e.g. my-service)", b.Name)
	}
	if b.Port < 1 || b.Port > 65535 {
		return refused(b.Name, "%s: the cluster port %d is out of range; give a port from 1 to 65535 (e.g. -s %s:8080:3000)", b.Name, b.Port, b.Name)
	}
	if b.Target < 1 || b.Target > 65535 {
		return refused(b.Name, "%s: the agent's port %d for it is out of range (1 to 65535)", b.Name, b.Target)
	}
	if b.Holder.Run == "" {
		return refused(b.Name, "%s: the run holding it has no id", b.Name)
	}
	return nil
}

// checkTakeover refuses a deployed Service plug cannot take over, saying
// why, and returns the Service port that b serves.
func checkTakeover(svc *k8sapi.Service, b tunnel.Binding) (k8sapi.ServicePort, error) {
	name := svc.Metadata.Name
	switch {
	case svc.Spec.Type == k8sapi.ServiceExternalName:
		return k8sapi.ServicePort{}, refused(name, "%s is an ExternalName Service (an alias of %s in DNS, with no address of its own to reroute); plug cannot serve it: choose another name, or point the callers at a name plug serves", name, svc.Spec.ExternalName)
	case svc.Spec.ClusterIP == k8sapi.ClusterIPNone:
		return k8sapi.ServicePort{}, refused(name, "%s is a headless Service (clusterIP: None): callers resolve it to pod addresses and connect straight to them, so there is no Service address plug could reroute; choose another name, or give the Service a ClusterIP", name)
	case len(svc.Spec.Selector) == 0:
		return k8sapi.ServicePort{}, refused(name, "%s has no selector: its endpoints are written by hand or by another controller, which plug would have to overwrite and could not put back; choose another name", name)
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
	return k8sapi.ServicePort{}, refused(name, "%s exists and answers on %s, not on %d/TCP; serve one of its TCP ports (e.g. -s %s:%d:LOCALPORT)", name, strings.Join(have, ", "), b.Port, name, firstTCP(svc.Spec.Ports, b.Port))
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
