package swarmplatform

import (
	"cmp"
	"context"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"plug/swarmapi"
	"plug/tunnel"
)

// labelExpose, on a service, lists the ports callers use ("8080,9090"; a
// UDP port as "8125/udp"), for services whose image and spec do not say.
const labelExpose = "plug.dev/expose"

// namesResync is how often WatchNames lists the names even without an
// event, and how long it waits before following events again after their
// stream broke.
const namesResync = 30 * time.Second

// WatchNames calls update with the names tasks on the agent's networks
// reach (see Names), at once and again after every change of a service,
// which the engine's event stream announces, until ctx ends.
func (p *Platform) WatchNames(ctx context.Context, update func([]tunnel.ClusterName)) error {
	since := time.Now() // the events from here on are followed: none is missed
	last, err := p.Names(ctx)
	if err != nil {
		var e *swarmapi.Error
		if errors.As(err, &e) && e.Status == 503 {
			return err // not a manager: listing services will not start working
		}
		p.opts.Logf("listing the names on %s: %v", p.networkNames(), err)
	}
	update(last)

	changed := make(chan struct{}, 1)
	go p.followEvents(ctx, since, "service", namesResync, "names are listed every "+namesResync.String(), func(swarmapi.Event) {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	resync := time.NewTicker(namesResync)
	defer resync.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-resync.C:
		}
		names, err := p.Names(ctx)
		if err != nil {
			if ctx.Err() == nil {
				p.opts.Logf("listing the names on %s: %v", p.networkNames(), err)
			}
			continue
		}
		if !reflect.DeepEqual(names, last) {
			last = names
			update(names)
		}
	}
}

// Names lists what tasks on the agent's networks reach by name: every
// service attached to one of them, under its service name and its aliases
// there (the shortest is the Name, the others Aliases). Its ports are those
// its label plug.dev/expose lists, else the target ports it publishes and
// the ports its image exposes, TCP and UDP. Served names are listed with the ports
// their relay forwards; parked services are left out, as their relay
// answers for them, and so are the copies of services taken over
// personally, and the agent's own service, which runs neither
// serve nor reach. A volume helper's service is Unlisted: the agent dials
// it for the run that mounts the volume, but no run is told it as a name.
func (p *Platform) Names(ctx context.Context) ([]tunnel.ClusterName, error) {
	all, err := p.opts.Client.Services(ctx, nil)
	if err != nil {
		return nil, err
	}
	images := map[string]portSet{} // exposed ports by image, asked once each
	var names []tunnel.ClusterName
	for i := range all {
		s := &all[i]
		if _, parked := s.Spec.Labels[labelReceipt]; parked || s.ID == p.opts.Service || s.Spec.Labels[labelCopy] != "" {
			continue
		}
		forms, onOurs := p.formsOnAgentNetworks(s)
		if !onOurs {
			continue
		}
		var ports portSet
		if served := s.Spec.Labels[labelRelay]; served != "" {
			// A takeover's relay answers to the parked service's names, not
			// to its own plug-NAME.
			forms = append(slices.DeleteFunc(forms, func(f string) bool { return f == s.Spec.Name }), served)
			for port := range parsePorts(s.Spec.Labels[labelPorts]) {
				if port.UDP {
					ports.udp = append(ports.udp, port.Port)
				} else {
					ports.tcp = append(ports.tcp, port.Port)
				}
			}
		} else {
			ports = p.servicePorts(ctx, s, images)
		}
		n := clusterName(forms, ports)
		n.Unlisted = s.Spec.Labels[labelVolume] != "" // a volume helper's, which its run reaches through its own port
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b tunnel.ClusterName) int { return strings.Compare(a.Name, b.Name) })
	return names, nil
}

// portSet is a service's TCP and UDP ports.
type portSet struct{ tcp, udp []int }

// add adds port of protocol proto ("tcp", "" or "udp"; others are left
// out).
func (s *portSet) add(port int, proto string) {
	switch proto {
	case "", "tcp":
		s.tcp = append(s.tcp, port)
	case "udp":
		s.udp = append(s.udp, port)
	}
}

// clusterName makes the shortest of forms the name, the others aliases.
func clusterName(forms []string, ports portSet) tunnel.ClusterName {
	slices.SortFunc(forms, func(a, b string) int { return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b)) })
	forms = slices.Compact(forms)
	n := tunnel.ClusterName{Name: forms[0], Ports: sortedUnique(ports.tcp), UDPPorts: sortedUnique(ports.udp)}
	if len(forms) > 1 {
		n.Aliases = forms[1:]
	}
	return n
}

// formsOnAgentNetworks returns the names s answers to on the agent's
// networks (its service name and its aliases there), and whether s is
// attached to any of them.
func (p *Platform) formsOnAgentNetworks(s *swarmapi.Service) ([]string, bool) {
	forms := []string{s.Spec.Name}
	attached := false
	for _, a := range s.Spec.NetworkAttachments() {
		if slices.ContainsFunc(p.opts.Networks, func(n NetworkRef) bool { return a.Target == n.ID || a.Target == n.Name }) {
			attached = true
			forms = append(forms, a.Aliases...)
		}
	}
	return forms, attached
}

// servicePorts are the ports callers of s use; see Names.
func (p *Platform) servicePorts(ctx context.Context, s *swarmapi.Service, images map[string]portSet) portSet {
	var ports portSet
	if expose := s.Spec.Labels[labelExpose]; expose != "" {
		for _, f := range strings.Split(expose, ",") {
			port, proto, _ := strings.Cut(strings.TrimSpace(f), "/")
			if n, err := strconv.Atoi(port); err == nil && n > 0 && n < 65536 {
				ports.add(n, proto)
			}
		}
		return ports
	}
	if s.Spec.EndpointSpec != nil {
		for _, pc := range s.Spec.EndpointSpec.Ports {
			ports.add(int(pc.TargetPort), pc.Protocol)
		}
	}
	if cs := s.Spec.TaskTemplate.ContainerSpec; cs != nil {
		exposed, asked := images[cs.Image]
		if !asked {
			exposed = p.exposedPorts(ctx, cs.Image)
			images[cs.Image] = exposed
		}
		ports.tcp = append(ports.tcp, exposed.tcp...)
		ports.udp = append(ports.udp, exposed.udp...)
	}
	return ports
}

// exposedPorts are the ports image exposes; none when it is not on this
// node.
func (p *Platform) exposedPorts(ctx context.Context, image string) portSet {
	var ports portSet
	img, err := p.opts.Client.Image(ctx, image)
	if err != nil {
		return ports
	}
	for spec := range img.Config.ExposedPorts {
		port, proto, _ := strings.Cut(spec, "/")
		if n, err := strconv.Atoi(port); err == nil {
			ports.add(n, proto)
		}
	}
	return ports
}

func sortedUnique(ports []int) []int {
	slices.Sort(ports)
	return slices.Compact(ports)
}
