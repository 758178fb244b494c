package kubeplatform

import (
	"context"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"plug/k8sapi"
	"plug/tunnel"
)

// defaultClusterDomain is the cluster's DNS domain when the agent's
// resolv.conf does not tell another.
const defaultClusterDomain = "cluster.local"

// WatchNames follows the namespace's Services; see tunnel.Platform. Each
// Service with a TCP port is a name, in the four forms a pod of the
// namespace uses: "web", "web.NS", "web.NS.svc" and "web.NS.svc.DOMAIN".
// Services without TCP ports are left out. A watch the API server ends is
// resumed; WatchNames returns only when ctx ends or the agent may not
// watch Services.
func (p *Platform) WatchNames(ctx context.Context, update func([]tunnel.ClusterName)) error {
	domain := clusterDomain(readResolvConf())
	services := map[string]k8sapi.Service{}
	var last []tunnel.ClusterName
	publish := func() {
		names := serviceNames(services, p.ns, domain)
		if last == nil || !slices.EqualFunc(names, last, sameName) {
			last = names
			update(names)
		}
	}
	return p.c.Services(p.ns).Follow(ctx, k8sapi.ListOptions{}, 10*time.Second, k8sapi.Handler[k8sapi.Service]{
		Synced: func(items []k8sapi.Service) {
			clear(services)
			for _, s := range items {
				services[s.Metadata.Name] = s
			}
			publish()
		},
		Changed: func(ev k8sapi.Event[k8sapi.Service]) {
			switch ev.Type {
			case k8sapi.Added, k8sapi.Modified:
				services[ev.Object.Metadata.Name] = ev.Object
			case k8sapi.Deleted:
				delete(services, ev.Object.Metadata.Name)
			}
			publish()
		},
	})
}

// serviceNames lists the names of services, sorted, never nil.
func serviceNames(services map[string]k8sapi.Service, ns, domain string) []tunnel.ClusterName {
	names := []tunnel.ClusterName{}
	for _, name := range slices.Sorted(maps.Keys(services)) {
		var ports []int
		for _, sp := range services[name].Spec.Ports {
			if sp.Protocol == "" || sp.Protocol == "TCP" {
				ports = append(ports, sp.Port)
			}
		}
		if len(ports) == 0 {
			continue
		}
		slices.Sort(ports)
		names = append(names, tunnel.ClusterName{
			Name:    name,
			Aliases: []string{name + "." + ns, name + "." + ns + ".svc", name + "." + ns + ".svc." + domain},
			Ports:   slices.Compact(ports),
		})
	}
	return names
}

func sameName(a, b tunnel.ClusterName) bool {
	return a.Name == b.Name && slices.Equal(a.Aliases, b.Aliases) && slices.Equal(a.Ports, b.Ports)
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
