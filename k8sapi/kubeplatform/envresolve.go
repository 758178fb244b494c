package kubeplatform

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"

	"plug/k8sapi"
	"plug/tunnel"
)

// A container's environment, made from its pod's spec exactly as the
// kubelet makes it (pkg/kubelet/kubelet_pods.go, makeEnvironmentVariables,
// Kubernetes 1.37):
//
//  1. The service links: for the Services of the pod's namespace when
//     enableServiceLinks is on (the default), and always for the
//     "kubernetes" Service of the default namespace.
//  2. envFrom, in order: every key of each ConfigMap (data, not binaryData)
//     or Secret, with the entry's prefix; a later entry replaces an earlier
//     one's key. A missing source is skipped when optional, else the
//     kubelet does not start the container.
//  3. env, in order, replacing what came before: a value has its $(NAME)
//     references expanded (envexpand.go) against what is defined so far
//     (envFrom and the env entries above it) and then the service links;
//     valueFrom reads a ConfigMap or Secret key (a missing optional key or
//     source leaves the variable as it was), a field of the pod, or a
//     resource of a container.
//  4. The service links not defined by 2 or 3.
//
// The agent may lack a right the kubelet has (reading Secrets), or a fact
// only the node knows (its allocatable resources, when a limit is not set).
// Such a variable is not guessed: it is a gap, with the reason and the
// missing right, and so is every variable whose value refers to it.

// envReader reads the objects a container's environment names.
type envReader interface {
	configMap(ctx context.Context, name string) (*k8sapi.ConfigMap, error)
	secret(ctx context.Context, name string) (*k8sapi.Secret, error)
}

// envPod is the pod an environment is made for: a pod that exists, or,
// when the workload has none running, one made from its template, whose
// name, uid, node and addresses are not known.
type envPod struct {
	pod          *k8sapi.Pod
	fromTemplate bool
}

// containerEnv is a container's environment as far as the agent can know it.
type containerEnv struct {
	vars map[string]string
	// gaps are variables the container has whose values the agent does not
	// know, by name.
	gaps map[string]envGap
	// unread are the envFrom sources the agent could not read: it does not
	// know which variables they hold.
	unread []unreadSource
	// sources are the ConfigMaps and Secrets values were read from, and
	// the keys read.
	sources []tunnel.EnvSource
}

// envGap says why a variable's value is not known.
type envGap struct {
	why  string // e.g. `Secret "db", key "password"`
	rule string // the right that would let the agent read it; "" when no right would
}

// unreadSource is an envFrom entry the agent could not read.
type unreadSource struct {
	what   string // e.g. `Secret "creds"`
	prefix string
	rule   string
}

// The rules the values of an environment need: RBAC verbs and resources.
const (
	ruleGetConfigMaps = "get configmaps"
	ruleGetSecrets    = "get secrets"
)

// envSourceKind is a kind of object env and envFrom read.
type envSourceKind struct {
	name string // "ConfigMap" or "Secret"
	rule string
}

var (
	sourceConfigMap = envSourceKind{"ConfigMap", ruleGetConfigMaps}
	sourceSecret    = envSourceKind{"Secret", ruleGetSecrets}
)

// envSourceData is a ConfigMap's or Secret's data, read once per
// environment as the kubelet does, or why it could not be read.
type envSourceData struct {
	data map[string]string
	err  error
}

// envResolution is the making of one container's environment.
type envResolution struct {
	r       envReader
	pod     envPod
	read    map[string]envSourceData // by kind and name
	tmp     map[string]string        // the kubelet's tmpEnv: envFrom, then env
	gaps    map[string]envGap
	unread  []unreadSource
	service map[string]string
	keys    map[envSourceRef]map[string]bool // the keys read, by source
}

// envSourceRef names a ConfigMap or Secret.
type envSourceRef struct{ kind, name string }

// used records that key of source kind/name was read.
func (rs *envResolution) used(kind envSourceKind, name, key string) {
	ref := envSourceRef{kind.name, name}
	if rs.keys[ref] == nil {
		rs.keys[ref] = map[string]bool{}
	}
	rs.keys[ref][key] = true
}

// sources lists the keys read, by kind and name.
func (rs *envResolution) sources() []tunnel.EnvSource {
	out := make([]tunnel.EnvSource, 0, len(rs.keys))
	for ref, keys := range rs.keys {
		out = append(out, tunnel.EnvSource{Kind: ref.kind, Name: ref.name, Keys: slices.Sorted(maps.Keys(keys))})
	}
	slices.SortFunc(out, func(a, b tunnel.EnvSource) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// resolveEnv makes container c's environment in pod p, with serviceEnv the
// service links of the pod (serviceLinkEnv). An error is a spec the
// kubelet would refuse to start the container with (a source that does
// not exist and is not optional), or a failure to read the cluster.
func resolveEnv(ctx context.Context, r envReader, p envPod, c *k8sapi.Container, serviceEnv map[string]string) (*containerEnv, error) {
	rs := &envResolution{
		r: r, pod: p, read: map[string]envSourceData{},
		tmp: map[string]string{}, gaps: map[string]envGap{}, service: serviceEnv,
		keys: map[envSourceRef]map[string]bool{},
	}
	for i, from := range c.EnvFrom {
		if err := rs.addFrom(ctx, i, from); err != nil {
			return nil, err
		}
	}
	for _, ev := range c.Env {
		value, gap, set, err := rs.value(ctx, c, ev)
		switch {
		case err != nil:
			return nil, fmt.Errorf("env %s: %w", ev.Name, err)
		case !set:
			// An optional source or key that is missing: the kubelet leaves
			// the variable as the entries before made it.
		case gap != nil:
			delete(rs.tmp, ev.Name)
			rs.gaps[ev.Name] = *gap
		default:
			rs.tmp[ev.Name] = value
			delete(rs.gaps, ev.Name)
		}
	}
	vars := make(map[string]string, len(rs.tmp)+len(serviceEnv))
	for k, v := range serviceEnv {
		if _, gap := rs.gaps[k]; !gap {
			vars[k] = v
		}
	}
	for k, v := range rs.tmp {
		vars[k] = v
	}
	return &containerEnv{vars: vars, gaps: rs.gaps, unread: rs.unread, sources: rs.sources()}, nil
}

// source reads a ConfigMap's or Secret's data, once per name.
func (rs *envResolution) source(ctx context.Context, kind envSourceKind, name string) envSourceData {
	key := kind.name + "/" + name
	if d, ok := rs.read[key]; ok {
		return d
	}
	var d envSourceData
	switch kind {
	case sourceConfigMap:
		cm, err := rs.r.configMap(ctx, name)
		if err == nil {
			d.data = cm.Data
		}
		d.err = err
	default:
		s, err := rs.r.secret(ctx, name)
		if err == nil {
			d.data = make(map[string]string, len(s.Data))
			for k, v := range s.Data {
				d.data[k] = string(v)
			}
		}
		d.err = err
	}
	if d.err == nil || k8sapi.IsNotFound(d.err) || k8sapi.IsForbidden(d.err) {
		rs.read[key] = d
	}
	return d
}

// addFrom adds envFrom entry i.
func (rs *envResolution) addFrom(ctx context.Context, i int, from k8sapi.EnvFromSource) error {
	kind, ref := sourceConfigMap, from.ConfigMapRef
	if ref == nil {
		kind, ref = sourceSecret, from.SecretRef
	}
	if ref == nil {
		return nil
	}
	what := fmt.Sprintf("%s %q", kind.name, ref.Name)
	d := rs.source(ctx, kind, ref.Name)
	switch {
	case k8sapi.IsNotFound(d.err) && k8sapi.IsOptional(ref.Optional):
		return nil
	case k8sapi.IsNotFound(d.err):
		return fmt.Errorf("envFrom[%d]: %s does not exist and is not optional, so the kubelet does not start the container either; create it, or mark it optional", i, what)
	case k8sapi.IsForbidden(d.err):
		rs.unread = append(rs.unread, unreadSource{what: what, prefix: from.Prefix, rule: kind.rule})
		return nil
	case d.err != nil:
		return fmt.Errorf("envFrom[%d]: reading %s: %w", i, what, d.err)
	}
	for k, v := range d.data {
		rs.tmp[from.Prefix+k] = v
		rs.used(kind, ref.Name, k)
	}
	return nil
}

// value is env entry ev's value, or the gap that stands for it; set is
// false when the entry leaves the variable as it was.
func (rs *envResolution) value(ctx context.Context, c *k8sapi.Container, ev k8sapi.EnvVar) (value string, gap *envGap, set bool, err error) {
	if ev.Value != "" {
		value, gap = rs.expand(ev.Value)
		return value, gap, true, nil
	}
	from := ev.ValueFrom
	switch {
	case from == nil:
		return "", nil, true, nil
	case from.FieldRef != nil:
		value, gap, err = rs.pod.field(from.FieldRef)
		return value, gap, true, err
	case from.ResourceFieldRef != nil:
		value, gap, err = rs.pod.resource(c, from.ResourceFieldRef)
		return value, gap, true, err
	case from.ConfigMapKeyRef != nil:
		return rs.key(ctx, sourceConfigMap, from.ConfigMapKeyRef)
	case from.SecretKeyRef != nil:
		return rs.key(ctx, sourceSecret, from.SecretKeyRef)
	case from.FileKeyRef != nil:
		f := from.FileKeyRef
		return "", &envGap{why: fmt.Sprintf("key %q of the file %s in volume %q, which only the node reads", f.Key, f.Path, f.VolumeName)}, true, nil
	}
	return "", &envGap{why: "a valueFrom source this version of plug does not know"}, true, nil
}

// key reads one key of a ConfigMap or Secret.
func (rs *envResolution) key(ctx context.Context, kind envSourceKind, ref *k8sapi.KeySelector) (string, *envGap, bool, error) {
	what := fmt.Sprintf("%s %q", kind.name, ref.Name)
	optional := k8sapi.IsOptional(ref.Optional)
	d := rs.source(ctx, kind, ref.Name)
	switch {
	case k8sapi.IsNotFound(d.err) && optional:
		return "", nil, false, nil
	case k8sapi.IsNotFound(d.err):
		return "", nil, false, fmt.Errorf("%s does not exist and the reference is not optional, so the kubelet does not start the container either", what)
	case k8sapi.IsForbidden(d.err):
		return "", &envGap{why: fmt.Sprintf("%s, key %q", what, ref.Key), rule: kind.rule}, true, nil
	case d.err != nil:
		return "", nil, false, fmt.Errorf("reading %s: %w", what, d.err)
	}
	v, ok := d.data[ref.Key]
	switch {
	case !ok && optional:
		return "", nil, false, nil
	case !ok:
		return "", nil, false, fmt.Errorf("%s has no key %q and the reference is not optional, so the kubelet does not start the container either", what, ref.Key)
	}
	rs.used(kind, ref.Name, ref.Key)
	return v, nil, true, nil
}

// expand expands value's references as the kubelet does. A reference to a
// gap, or to a name an unread envFrom source may hold, makes the value a
// gap too.
func (rs *envResolution) expand(value string) (string, *envGap) {
	var gap *envGap
	out := expandRefs(value, func(name string) (string, bool) {
		if v, ok := rs.tmp[name]; ok {
			return v, true
		}
		if g, ok := rs.gaps[name]; ok {
			if gap == nil {
				gap = &envGap{why: fmt.Sprintf("refers to $(%s): %s", name, g.why), rule: g.rule}
			}
			return "", true
		}
		if v, ok := rs.service[name]; ok {
			return v, true
		}
		for _, u := range rs.unread {
			if strings.HasPrefix(name, u.prefix) {
				if gap == nil {
					gap = &envGap{why: fmt.Sprintf("refers to $(%s), which %s (envFrom) may hold", name, u.what), rule: u.rule}
				}
				return "", true
			}
		}
		return "", false
	})
	if gap != nil {
		return "", gap
	}
	return out, nil
}

// field is a fieldRef's value: the downward API of env.
func (p envPod) field(fs *k8sapi.ObjectFieldSelector) (string, *envGap, error) {
	if fs.APIVersion != "" && fs.APIVersion != "v1" {
		return "", nil, fmt.Errorf("fieldRef of apiVersion %q: only v1 exists", fs.APIVersion)
	}
	pod, path := p.pod, fs.FieldPath
	unknown := func(why string) (string, *envGap, error) {
		return "", &envGap{why: path + ": " + why}, nil
	}
	if field, key, ok := subscripted(path); ok {
		var m map[string]string
		switch field {
		case "metadata.labels":
			m = pod.Metadata.Labels
		case "metadata.annotations":
			m = pod.Metadata.Annotations
		default:
			return "", nil, fmt.Errorf("fieldRef %s: %s takes no subscript", path, field)
		}
		v, ok := m[key]
		if !ok && p.fromTemplate {
			return unknown("no pod runs, and the pod template does not set it")
		}
		return v, nil, nil
	}
	noPod := "no pod of the workload runs"
	switch path {
	case "metadata.namespace":
		return pod.Metadata.Namespace, nil, nil
	case "spec.serviceAccountName":
		if pod.Spec.ServiceAccountName == "" {
			return "default", nil, nil // what the ServiceAccount admission sets
		}
		return pod.Spec.ServiceAccountName, nil, nil
	case "metadata.name", "metadata.uid", "spec.nodeName", "spec.host":
		if p.fromTemplate {
			return unknown(noPod)
		}
	case "status.podIP", "status.podIPs", "status.hostIP", "status.hostIPs":
		if p.fromTemplate {
			return unknown(noPod)
		}
	default:
		return "", nil, fmt.Errorf("fieldRef %s: not a field the downward API gives env", path)
	}
	switch path {
	case "metadata.name":
		return pod.Metadata.Name, nil, nil
	case "metadata.uid":
		return pod.Metadata.UID, nil, nil
	case "spec.nodeName", "spec.host":
		if pod.Spec.NodeName == "" {
			return unknown("the pod is not scheduled on a node yet")
		}
		return pod.Spec.NodeName, nil, nil
	}
	ips, one := pod.Status.PodIPs, pod.Status.PodIP
	if strings.HasPrefix(path, "status.host") {
		ips, one = pod.Status.HostIPs, pod.Status.HostIP
	}
	var all []string
	for _, ip := range ips {
		all = append(all, ip.IP)
	}
	if len(all) == 0 && one != "" {
		all = []string{one}
	}
	if len(all) == 0 {
		return unknown("the pod has no address yet")
	}
	if strings.HasSuffix(path, "IPs") {
		return strings.Join(all, ","), nil, nil
	}
	return all[0], nil, nil
}

// subscripted splits "metadata.labels['key']" into its field and key.
func subscripted(path string) (field, key string, ok bool) {
	rest, ok := strings.CutSuffix(path, "']")
	if !ok {
		return "", "", false
	}
	field, key, ok = strings.Cut(rest, "['")
	if !ok || field == "" {
		return "", "", false
	}
	return field, key, true
}

// The resources whose unset limit the kubelet replaces with the node's
// allocatable (or the pod's own limit, when the pod sets one).
var defaultedLimits = map[string]bool{"cpu": true, "memory": true, "ephemeral-storage": true}

// resource is a resourceFieldRef's value for container c.
func (p envPod) resource(c *k8sapi.Container, rf *k8sapi.ResourceFieldSelector) (string, *envGap, error) {
	if rf.ContainerName != "" {
		c = nil
		for i := range p.pod.Spec.Containers {
			if p.pod.Spec.Containers[i].Name == rf.ContainerName {
				c = &p.pod.Spec.Containers[i]
			}
		}
		if c == nil {
			return "", nil, fmt.Errorf("resourceFieldRef %s: the pod has no container %q", rf.Resource, rf.ContainerName)
		}
	}
	// No divisor, which the API server stores as "0", is 1.
	div, err := parseQuantity("1")
	if rf.Divisor != "" {
		if d, err := parseQuantity(rf.Divisor); err != nil {
			return "", nil, fmt.Errorf("resourceFieldRef %s: divisor: %w", rf.Resource, err)
		} else if d.r.Sign() != 0 {
			div = d
		}
	}
	if err != nil || div.scaled(-3) <= 0 {
		return "", nil, fmt.Errorf("resourceFieldRef %s: divisor %q is not a quantity plug can divide by", rf.Resource, rf.Divisor)
	}
	kind, name, _ := strings.Cut(rf.Resource, ".")
	if !defaultedLimits[name] && !strings.HasPrefix(name, "hugepages-") || kind != "limits" && kind != "requests" {
		return "", nil, fmt.Errorf("resourceFieldRef %s: not a resource the downward API gives", rf.Resource)
	}
	var value string
	var set bool
	if kind == "limits" {
		value, set = nonZero(c.Resources.Limits, name)
		if !set && defaultedLimits[name] {
			if p.pod.Spec.Resources != nil {
				value, set = nonZero(p.pod.Spec.Resources.Limits, name)
			}
			if !set {
				return "", &envGap{why: fmt.Sprintf("%s is not set, so the kubelet gives the node's allocatable %s, which the agent does not read", rf.Resource, name)}, nil
			}
		}
	} else {
		value, set = c.Resources.Requests[name]
		if !set && p.fromTemplate {
			// The API server defaults a request to the limit when a pod is created.
			value, set = c.Resources.Limits[name]
		}
	}
	if !set {
		value = "0"
	}
	q, err := parseQuantity(value)
	if err != nil {
		return "", nil, fmt.Errorf("resourceFieldRef %s: %w", rf.Resource, err)
	}
	return inUnits(q, div, name == "cpu"), nil, nil
}

// nonZero is list[name] when it is set to a quantity other than zero.
func nonZero(list map[string]string, name string) (string, bool) {
	v, ok := list[name]
	if !ok {
		return "", false
	}
	q, err := parseQuantity(v)
	if err == nil && q.r.Sign() == 0 {
		return "", false
	}
	return v, true
}

// serviceLinkEnv is the kubelet's variables for services: for each
// Service with a cluster IP, NAME_SERVICE_HOST, NAME_SERVICE_PORT (the
// first port), NAME_SERVICE_PORT_PORTNAME for each named port, and the
// Docker-link style NAME_PORT, NAME_PORT_P_PROTO, _PROTO, _PORT and _ADDR;
// NAME is the Service's name in upper case with '-' as '_'. Services are
// taken in name order, so that of two names that collide the later wins.
func serviceLinkEnv(services []k8sapi.Service) map[string]string {
	sorted := append([]k8sapi.Service(nil), services...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Metadata.Name < sorted[j].Metadata.Name })
	env := map[string]string{}
	for _, s := range sorted {
		ip := s.Spec.ClusterIP
		if ip == "" || ip == k8sapi.ClusterIPNone || len(s.Spec.Ports) == 0 {
			continue
		}
		name := strings.ToUpper(strings.ReplaceAll(s.Metadata.Name, "-", "_"))
		env[name+"_SERVICE_HOST"] = ip
		env[name+"_SERVICE_PORT"] = strconv.Itoa(s.Spec.Ports[0].Port)
		for _, sp := range s.Spec.Ports {
			if sp.Name != "" {
				env[name+"_SERVICE_PORT_"+strings.ToUpper(strings.ReplaceAll(sp.Name, "-", "_"))] = strconv.Itoa(sp.Port)
			}
		}
		for i, sp := range s.Spec.Ports {
			proto := sp.Protocol
			if proto == "" {
				proto = "TCP"
			}
			url := strings.ToLower(proto) + "://" + net.JoinHostPort(ip, strconv.Itoa(sp.Port))
			if i == 0 {
				env[name+"_PORT"] = url
			}
			prefix := fmt.Sprintf("%s_PORT_%d_%s", name, sp.Port, strings.ToUpper(proto))
			env[prefix] = url
			env[prefix+"_PROTO"] = strings.ToLower(proto)
			env[prefix+"_PORT"] = strconv.Itoa(sp.Port)
			env[prefix+"_ADDR"] = ip
		}
	}
	return env
}
