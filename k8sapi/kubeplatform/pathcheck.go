package kubeplatform

import (
	"fmt"

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
// Services: a change of the route of a name held here (not of its
// heartbeat) is checked by the guard, and proved again, at once. Only the
// routes of held names are kept, so that the Services of a large
// namespace cost nothing here: the first change of a name after it is
// held counts as a change of its route.
func (p *Platform) serviceChanges() func(k8sapi.Service) {
	routes := map[string]string{} // by name, of the held Services seen; calls never overlap
	return func(svc k8sapi.Service) {
		name := svc.Metadata.Name
		if p.holdingOf(name) == nil {
			delete(routes, name)
			return
		}
		route := fmt.Sprint(svc.Spec.Type, svc.Spec.ClusterIP, selectorString(svc.Spec.Selector), svc.Spec.Ports)
		if svc.Metadata.DeletionTimestamp != nil {
			route = "deleted"
		}
		if routes[name] == route {
			return
		}
		routes[name] = route
		p.kickGuard()
		p.pathChanged(name)
	}
}
