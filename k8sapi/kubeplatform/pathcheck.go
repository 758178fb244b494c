package kubeplatform

import (
	"fmt"
	"strconv"
	"strings"

	"plug/k8sapi"
	"plug/tunnel"
)

// The agent proves the path of each served name (tunnel's path proof);
// the platform tells it at once when what routes a name it holds changed:
// the Service's selector, ports or address, or its EndpointSlices.

var _ tunnel.NamedPlatform = (*Platform)(nil)

// String names the platform for the developer's terminal and plug doctor
// (tunnel.NamedPlatform).
func (p *Platform) String() string { return "Kubernetes, namespace " + p.ns }

// pathChanged tells the run holding name here, if any, that what routes
// the name changed.
func (p *Platform) pathChanged(name string) {
	if h := p.holdingOf(name); h != nil {
		notify(h, tunnel.Event{Name: name, Kind: tunnel.EventPathChanged})
	}
}

// sliceChanged is called with each change of the namespace's
// EndpointSlices.
func (p *Platform) sliceChanged(s k8sapi.EndpointSlice) {
	p.kickGuard()
	p.pathChanged(s.Metadata.Labels[k8sapi.LabelServiceName])
}

// serviceChanges returns what to call with each change of the namespace's
// Services: a change of the route of a name held here is checked by the
// guard, and proved again, at once; a change of its receipt (someone gave
// it back, or it changed hands) is checked by the guard at once; a change
// of its heartbeat is neither. Only the routes and receipts of held names
// are kept, so that the Services of a large namespace cost nothing here:
// the first change of a name after it is held counts as a change of both.
func (p *Platform) serviceChanges() func(k8sapi.Service) {
	// By name, of the held Services seen; calls never overlap.
	routes, receipts := map[string]string{}, map[string]string{}
	return func(svc k8sapi.Service) {
		name := svc.Metadata.Name
		if p.holdingOf(name) == nil {
			delete(routes, name)
			delete(receipts, name)
			return
		}
		route := routeOf(svc)
		if svc.Metadata.DeletionTimestamp != nil {
			route = "deleted"
		}
		receipt, has := svc.Metadata.Annotations[AnnotationReceipt]
		if !has {
			receipt = "none"
		}
		if routes[name] == route && receipts[name] == receipt {
			return
		}
		receipts[name] = receipt
		p.kickGuard()
		if routes[name] != route {
			routes[name] = route
			p.pathChanged(name)
		}
	}
}

// routeOf is what of svc routes its name: its type, address, selector and
// ports, as text that two decodings of the same Service give alike.
func routeOf(svc k8sapi.Service) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s", svc.Spec.Type, svc.Spec.ClusterIP, selectorString(svc.Spec.Selector))
	for _, port := range svc.Spec.Ports {
		target := "-"
		if t := port.TargetPort; t != nil {
			target = t.String
			if target == "" {
				target = strconv.Itoa(t.Int)
			}
		}
		fmt.Fprintf(&b, " %s/%s:%d>%s,%d", port.Name, port.Protocol, port.Port, target, port.NodePort)
	}
	return b.String()
}
