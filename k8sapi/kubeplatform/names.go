package kubeplatform

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"plug/k8sapi"
	"plug/tunnel"
)

// defaultClusterDomain is the cluster's DNS domain when the agent's
// resolv.conf does not tell another.
const defaultClusterDomain = "cluster.local"

// NamespacesRole is the Role, and its RoleBinding, an operator creates in a
// namespace to offer its Services to runs (Options.Namespaces): list and
// watch services, nothing else.
const NamespacesRole = "plug-names"

// namespaceRetry is how soon the agent tries again to follow a namespace
// of Options.Namespaces it may not follow: a RoleBinding applied takes
// effect within it.
const namespaceRetry = time.Second

// The Service of the API server: the API server keeps it, in namespace
// default, with the address pods reach it at (KUBERNETES_SERVICE_HOST).
const (
	apiServerService   = "kubernetes"
	apiServerNamespace = "default"
)

// maxNamespaces caps Options.Namespaces: each is a watch the agent keeps
// open.
const maxNamespaces = 64

// WatchNames follows the Services of the agent's namespace and of every
// namespace of Options.Namespaces it may list and watch there; see
// tunnel.Platform. Each Service with a TCP or UDP port is a name, in the forms a
// pod of the agent's namespace uses: "web", "web.NS", "web.NS.svc" and
// "web.NS.svc.DOMAIN" in its own namespace; "web.DATA", "web.DATA.svc"
// and "web.DATA.svc.DOMAIN" in another (a pod's short "web" is its own
// namespace's). Services without TCP or UDP ports are left out, and so are plug's
// own (those that select the agent's pod): runs neither serve nor reach
// them. A volume helper's Service is Unlisted: the agent dials it for the
// run that mounts the volume, but no run is told it as a name. The Service kubernetes of namespace default, once listed, stands
// for the API server's address (tunnel.ClusterName.Protected): runs reach
// the API server by that name alone, as a pod does. A namespace the
// agent may not follow is left out, said in NameNotes, and tried again
// every namespaceRetry; one whose Role is taken away is left out when its
// watch next ends.
// A watch the API server ends is resumed; WatchNames returns only when
// ctx ends or the agent may not watch the Services of its own namespace.
func (p *Platform) WatchNames(ctx context.Context, update func([]tunnel.ClusterName)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &nameWatch{p: p, domain: clusterDomain(readResolvConf()), update: update, services: map[string]map[string]k8sapi.Service{}}
	var wg sync.WaitGroup
	for _, ns := range p.offered {
		wg.Go(func() { w.followOffered(ctx, ns) })
	}
	err := w.follow(ctx, p.ns)
	cancel()
	wg.Wait()
	w.mu.Lock()
	w.closed = true // a publish pending is dropped: update is not called after WatchNames returns
	w.mu.Unlock()
	return err
}

// publishDelay gathers the events of a burst (a namespace's Services
// applied at once) into one update: each update lists every name, so one
// per event would cost the agent the namespace's size times the burst's.
const publishDelay = 50 * time.Millisecond

var _ tunnel.NameNoter = (*Platform)(nil)

// NameNotes says which namespaces of Options.Namespaces the agent does
// not offer runs, why, and the commands that offer them
// (tunnel.NameNoter); current as of the last update WatchNames made.
func (p *Platform) NameNotes() []string {
	p.notesMu.Lock()
	defer p.notesMu.Unlock()
	return slices.Clone(p.notes)
}

// ExplainName says, of a host of the form svc.NS, svc.NS.svc or
// svc.NS.svc.DOMAIN that is not one of the names runs reach, that the
// agent does not offer namespace NS, and the commands that offer it, when
// NS is neither the agent's namespace nor listed in Options.Namespaces (a
// listed one that is not offered yet is in NameNotes); tunnel.NameNoter.
func (p *Platform) ExplainName(host string) string {
	labels := strings.Split(strings.ToLower(strings.TrimSuffix(host, ".")), ".")
	if len(labels) < 2 || len(labels) > 2 && labels[2] != "svc" || !isDNSLabel(labels[1]) {
		return ""
	}
	ns := labels[1]
	if ns == p.ns || slices.Contains(p.offered, ns) {
		return ""
	}
	return fmt.Sprintf("if %s is a namespace of the cluster, the agent does not offer its names (they are not in PLUG_NAMESPACES); the cluster admin offers it by adding it to PLUG_NAMESPACES and running: %s", ns, p.offerCommand(ns))
}

// nameWatch is the state of one WatchNames.
type nameWatch struct {
	p      *Platform
	domain string
	update func([]tunnel.ClusterName)

	mu       sync.Mutex
	synced   bool                                 // the own namespace was listed
	pending  bool                                 // a publish is due within publishDelay
	closed   bool                                 // WatchNames returned
	services map[string]map[string]k8sapi.Service // by namespace, by name, as kept (kept)
	refused  map[string]string                    // namespace → why it is left out
	last     []tunnel.ClusterName
	notes    []string
}

// follow keeps the Services of ns until ctx ends or Follow gives up.
func (w *nameWatch) follow(ctx context.Context, ns string) error {
	return w.p.c.Services(ns).Follow(ctx, k8sapi.ListOptions{}, 10*time.Second, k8sapi.Handler[k8sapi.Service]{
		Synced: func(items []k8sapi.Service) {
			w.mu.Lock()
			defer w.mu.Unlock()
			m := make(map[string]k8sapi.Service, len(items))
			for _, s := range items {
				m[s.Metadata.Name] = kept(s)
			}
			w.services[ns] = m
			if _, was := w.refused[ns]; was {
				w.p.logf("namespace %s is offered now: runs reach its Services", ns)
				delete(w.refused, ns)
			}
			if ns == w.p.ns {
				w.synced = true
			}
			w.publish()
		},
		Changed: func(ev k8sapi.Event[k8sapi.Service]) {
			w.mu.Lock()
			defer w.mu.Unlock()
			switch ev.Type {
			case k8sapi.Added, k8sapi.Modified:
				w.services[ns][ev.Object.Metadata.Name] = kept(ev.Object)
			case k8sapi.Deleted:
				delete(w.services[ns], ev.Object.Metadata.Name)
			}
			w.publishSoon()
		},
	})
}

// kept is what the agent keeps of a Service to tell its name: its name,
// its LabelVolume, address, selector and ports' numbers and protocols;
// not its other labels nor its annotations (kubectl's last-applied copy
// of the whole object, among others), so that a Service costs the agent a
// few hundred bytes.
func kept(s k8sapi.Service) k8sapi.Service {
	out := k8sapi.Service{Metadata: k8sapi.ObjectMeta{Name: s.Metadata.Name},
		Spec: k8sapi.ServiceSpec{ClusterIP: s.Spec.ClusterIP, Selector: s.Spec.Selector}}
	if v := s.Metadata.Labels[LabelVolume]; v != "" {
		out.Metadata.Labels = map[string]string{LabelVolume: v}
	}
	for _, sp := range s.Spec.Ports {
		out.Spec.Ports = append(out.Spec.Ports, k8sapi.ServicePort{Protocol: sp.Protocol, Port: sp.Port})
	}
	return out
}

// publishSoon publishes within publishDelay, once for every event until
// then. w.mu is held.
func (w *nameWatch) publishSoon() {
	if w.pending {
		return
	}
	w.pending = true
	time.AfterFunc(publishDelay, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.pending = false
		if !w.closed {
			w.publish()
		}
	})
}

// followOffered follows ns, another namespace, until ctx ends: whenever
// the agent may not follow it, its names are left out with a note, and it
// is tried again after namespaceRetry.
func (w *nameWatch) followOffered(ctx context.Context, ns string) {
	for {
		err := w.follow(ctx, ns)
		if ctx.Err() != nil {
			return
		}
		why := fmt.Sprintf("namespace %s is not offered by the agent: %v", ns, err)
		if k8sapi.IsForbidden(err) {
			why = fmt.Sprintf("namespace %s is not offered by the agent: it may not list and watch Services there; the cluster admin offers it with: %s", ns, w.p.offerCommand(ns))
		}
		w.mu.Lock()
		if w.refused == nil {
			w.refused = map[string]string{}
		}
		if w.refused[ns] != why {
			w.p.logf("%s", why)
		}
		w.refused[ns] = why
		delete(w.services, ns)
		w.publish()
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(namespaceRetry):
		}
	}
}

// publish calls update if the names or the notes changed, once the own
// namespace is listed. w.mu is held.
func (w *nameWatch) publish() {
	if !w.synced {
		return
	}
	var own []netip.Addr
	maps.DeleteFunc(w.services[w.p.ns], func(_ string, s k8sapi.Service) bool {
		if !w.p.ownService(&s) {
			return false
		}
		if ip, err := netip.ParseAddr(s.Spec.ClusterIP); err == nil {
			own = append(own, ip)
		}
		return true
	})
	if api, ok := w.services[apiServerNamespace][apiServerService]; ok {
		if ip, err := netip.ParseAddr(api.Spec.ClusterIP); err == nil {
			own = append(own, ip.Unmap()) // however the agent itself reaches the API server
		}
	}
	w.p.mu.Lock()
	w.p.ownIPs = own
	w.p.mu.Unlock()
	names := serviceNames(w.services[w.p.ns], w.p.ns, w.domain, true)
	for _, ns := range w.p.offered {
		if m, ok := w.services[ns]; ok {
			names = append(names, serviceNames(m, ns, w.domain, false)...)
		}
	}
	var notes []string
	for _, ns := range w.p.offered {
		if why, ok := w.refused[ns]; ok {
			notes = append(notes, why)
		}
	}
	if w.last != nil && slices.EqualFunc(names, w.last, sameName) && slices.Equal(notes, w.notes) {
		return
	}
	w.last, w.notes = names, notes
	w.p.notesMu.Lock()
	w.p.notes = notes
	w.p.notesMu.Unlock()
	w.update(names)
}

// offerCommand is what an admin runs to offer namespace ns to the agent:
// the Role NamespacesRole there, bound to the agent's ServiceAccount.
func (p *Platform) offerCommand(ns string) string {
	return fmt.Sprintf("kubectl -n %s create role %s --verb=list,watch --resource=services && kubectl -n %s create rolebinding %s --role=%s --serviceaccount=%s:%s",
		ns, NamespacesRole, ns, NamespacesRole, NamespacesRole, p.ns, p.account)
}

// serviceNames lists the names of services of namespace ns, sorted, never
// nil: by their short name if own (the agent's namespace), else by
// "NAME.NS".
func serviceNames(services map[string]k8sapi.Service, ns, domain string, own bool) []tunnel.ClusterName {
	names := []tunnel.ClusterName{}
	for _, name := range slices.Sorted(maps.Keys(services)) {
		var ports, udp []int
		for _, sp := range services[name].Spec.Ports {
			switch sp.Protocol {
			case "", "TCP":
				ports = append(ports, sp.Port)
			case "UDP":
				udp = append(udp, sp.Port)
			}
		}
		if len(ports) == 0 && len(udp) == 0 {
			continue
		}
		slices.Sort(ports)
		slices.Sort(udp)
		n := tunnel.ClusterName{
			Name:     name,
			Aliases:  []string{name + "." + ns, name + "." + ns + ".svc", name + "." + ns + ".svc." + domain},
			Ports:    slices.Compact(ports),
			UDPPorts: slices.Compact(udp),
			Unlisted: services[name].Metadata.Labels[LabelVolume] != "", // a volume helper's, which its run reaches through its own port
		}
		if !own {
			n.Name, n.Aliases = n.Aliases[0], n.Aliases[1:]
		}
		if ip, err := netip.ParseAddr(services[name].Spec.ClusterIP); err == nil && ns == apiServerNamespace && name == apiServerService {
			n.Protected = []netip.Addr{ip.Unmap()} // the API server's address, which its name stands for
		}
		names = append(names, n)
	}
	return names
}

func sameName(a, b tunnel.ClusterName) bool {
	return a.Name == b.Name && slices.Equal(a.Aliases, b.Aliases) && slices.Equal(a.Ports, b.Ports) && slices.Equal(a.UDPPorts, b.UDPPorts) && slices.Equal(a.Protected, b.Protected) && a.Unlisted == b.Unlisted
}

// ParseNamespaces reads PLUG_NAMESPACES: the other namespaces whose
// Services the agent offers runs, separated by commas or spaces. Each must
// be a namespace name (a DNS label); own, the agent's namespace, is left
// out; at most maxNamespaces.
func ParseNamespaces(s, own string) ([]string, error) {
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
		if !isDNSLabel(f) {
			return nil, fmt.Errorf("PLUG_NAMESPACES: %q is not a namespace name (1 to 63 lower-case letters, digits and '-', starting and ending with a letter or digit); list namespaces separated by commas, e.g. PLUG_NAMESPACES=data,messaging", tunnel.PeerText(f))
		}
		if f != own && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	if len(out) > maxNamespaces {
		return nil, fmt.Errorf("PLUG_NAMESPACES lists %d namespaces; the agent follows at most %d", len(out), maxNamespaces)
	}
	return out, nil
}

// serviceAccountToken is where the kubelet mounts the pod's token.
const serviceAccountToken = "/var/run/secrets/kubernetes.io/serviceaccount/token"

// tokenAccount returns the ServiceAccount named by the pod's token
// ("system:serviceaccount:NS:NAME" in its subject), or "" outside a pod.
func tokenAccount() string {
	b, err := os.ReadFile(serviceAccountToken)
	if err != nil {
		return ""
	}
	parts := strings.Split(strings.TrimSpace(string(b)), ".")
	if len(parts) != 3 {
		return ""
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var claims struct {
		Sub string `json:"sub"`
	}
	if json.Unmarshal(payload, &claims) != nil {
		return ""
	}
	rest, ok := strings.CutPrefix(claims.Sub, "system:serviceaccount:")
	_, name, _ := strings.Cut(rest, ":")
	if !ok || !isDNSSubdomain(name) {
		return ""
	}
	return name
}

// readResolvConf returns the agent's resolv.conf, or "" outside a pod.
func readResolvConf() string {
	b, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return ""
	}
	return string(b)
}

// clusterDomain reads the cluster's DNS domain from the search list the
// kubelet writes into every pod's resolv.conf ("NS.svc.DOMAIN svc.DOMAIN
// DOMAIN"), else returns defaultClusterDomain.
func clusterDomain(resolvConf string) string {
	for _, line := range strings.Split(resolvConf, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != "search" {
			continue
		}
		for _, f := range fields[1:] {
			if d, ok := strings.CutPrefix(strings.TrimSuffix(f, "."), "svc."); ok && d != "" {
				return d
			}
		}
	}
	return defaultClusterDomain
}
