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
	w := &nameWatch{p: p, domain: clusterDomain(readResolvConf()), update: update, services: map[string]map[string]keptService{}}
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
	synced   bool                              // the own namespace was listed
	pending  bool                              // a publish is due within publishDelay
	closed   bool                              // WatchNames returned
	told     bool                              // update was called
	changed  bool                              // the names changed since update was last called
	services map[string]map[string]keptService // by namespace, by name (a prefix of its host)
	refused  map[string]string                 // namespace → why it is left out
	notes    []string
}

// follow keeps the Services of ns until ctx ends or Follow gives up.
func (w *nameWatch) follow(ctx context.Context, ns string) error {
	return w.p.c.Services(ns).Follow(ctx, k8sapi.ListOptions{}, 10*time.Second, k8sapi.Handler[k8sapi.Service]{
		Synced: func(items []k8sapi.Service) {
			w.mu.Lock()
			defer w.mu.Unlock()
			m := make(map[string]keptService, len(items))
			for _, s := range items {
				if name, kept, ok := w.keep(s, ns); ok {
					m[name] = kept
				}
			}
			if old, ok := w.services[ns]; !ok || !maps.EqualFunc(old, m, sameService) {
				w.changed = true
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
			m := w.services[ns]
			old, had := m[ev.Object.Metadata.Name]
			name, kept, ok := w.keep(ev.Object, ns)
			if ev.Type == k8sapi.Deleted || !ok {
				delete(m, ev.Object.Metadata.Name)
				w.changed = w.changed || had && !old.own
			} else { // added or modified
				m[name] = kept
				wasName, isName := had && !old.own, !kept.own // plug's own change no name, only ownIPs
				w.changed = w.changed || wasName != isName || isName && !sameService(old, kept)
			}
			w.publishSoon()
		},
	})
}

// keptService is what the agent keeps of a Service to tell its name: its
// host name, ports' numbers and protocols, whether it is a volume
// helper's or plug's own, and the address of plug's own and the API
// server's; not its other labels nor its annotations (kubectl's
// last-applied copy of the whole object, among others), so that a Service
// costs the agent about a hundred bytes.
type keptService struct {
	host   string      // NAME.NS.svc.DOMAIN: its name and aliases are prefixes of this one string
	ports  []int       // its TCP ports, then its UDP ports, each sorted, each once
	tcp    int         // how many of ports are TCP
	ip     *netip.Addr // the ClusterIP of plug's own and of the API server's, else nil
	volume bool        // a volume helper's (LabelVolume): a name no run is told
	own    bool        // plug's own (it selects the agent's pod): no name at all
}

// keep returns what the agent keeps of s, a Service of namespace ns, and
// its name, a prefix of the kept host; false when s is neither a name
// (it has no TCP or UDP port) nor plug's own.
func (w *nameWatch) keep(s k8sapi.Service, ns string) (string, keptService, bool) {
	name := s.Metadata.Name
	out := keptService{host: name + "." + ns + ".svc." + w.domain, volume: s.Metadata.Labels[LabelVolume] != "",
		own: ns == w.p.ns && w.p.ownService(&s)}
	var udp []int
	for _, sp := range s.Spec.Ports {
		switch sp.Protocol {
		case "", "TCP":
			out.ports = append(out.ports, sp.Port)
		case "UDP":
			udp = append(udp, sp.Port)
		}
	}
	slices.Sort(out.ports)
	slices.Sort(udp)
	out.ports = slices.Compact(out.ports)
	out.tcp = len(out.ports)
	out.ports = slices.Clip(append(out.ports, slices.Compact(udp)...))
	if ip, err := netip.ParseAddr(s.Spec.ClusterIP); err == nil && (out.own || ns == apiServerNamespace && name == apiServerService) {
		out.ip = &ip
	}
	return out.host[:len(name)], out, out.own || len(out.ports) > 0
}

// sameService reports whether a and b are kept alike.
func sameService(a, b keptService) bool {
	return a.host == b.host && slices.Equal(a.ports, b.ports) && a.tcp == b.tcp && (a.ip == nil) == (b.ip == nil) && (a.ip == nil || *a.ip == *b.ip) &&
		a.volume == b.volume && a.own == b.own
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
	for _, s := range w.services[w.p.ns] {
		if s.own && s.ip != nil {
			own = append(own, *s.ip)
		}
	}
	if api, ok := w.services[apiServerNamespace][apiServerService]; ok && api.ip != nil {
		own = append(own, api.ip.Unmap()) // however the agent itself reaches the API server
	}
	w.p.mu.Lock()
	w.p.ownIPs = own
	w.p.mu.Unlock()
	var notes []string
	for _, ns := range w.p.offered {
		if why, ok := w.refused[ns]; ok {
			notes = append(notes, why)
		}
	}
	if w.told && !w.changed && slices.Equal(notes, w.notes) {
		return
	}
	size := 0
	for _, m := range w.services {
		size += len(m)
	}
	names := serviceNames(make([]tunnel.ClusterName, 0, size), w.services[w.p.ns], w.p.ns, true)
	for _, ns := range w.p.offered {
		if m, ok := w.services[ns]; ok {
			names = serviceNames(names, m, ns, false)
		}
	}
	w.told, w.changed, w.notes = true, false, notes
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

// serviceNames appends to names the names of services of namespace ns,
// sorted: by their short name if own (the agent's namespace), else by
// "NAME.NS"; not plug's own Services.
func serviceNames(names []tunnel.ClusterName, services map[string]keptService, ns string, own bool) []tunnel.ClusterName {
	for _, name := range slices.Sorted(maps.Keys(services)) {
		s := services[name]
		if s.own {
			continue
		}
		inNS := len(name) + 1 + len(ns)
		n := tunnel.ClusterName{
			Name:     name,
			Aliases:  []string{s.host[:inNS], s.host[:inNS+len(".svc")], s.host},
			Ports:    nonEmpty(s.ports[:s.tcp:s.tcp]),
			UDPPorts: nonEmpty(s.ports[s.tcp:]),
			Unlisted: s.volume, // a volume helper's, which its run reaches through its own port
		}
		if !own {
			n.Name, n.Aliases = n.Aliases[0], n.Aliases[1:]
		}
		if s.ip != nil && ns == apiServerNamespace && name == apiServerService {
			n.Protected = []netip.Addr{s.ip.Unmap()} // the API server's address, which its name stands for
		}
		names = append(names, n)
	}
	return names
}

// nonEmpty is ports, or nil when there are none.
func nonEmpty(ports []int) []int {
	if len(ports) == 0 {
		return nil
	}
	return ports
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
