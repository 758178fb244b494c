package kubeplatform

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"plug/k8sapi"
	"plug/tunnel"
)

// The environments of the namespace's workloads (plug --env-from): the
// workload's running pod, or its template when no pod runs; its
// container; the variables the kubelet makes from the spec (envresolve.go);
// and what only the running container knows, its image's ENV above all,
// read with `env -0` in the container through pods/exec when the agent may.

var _ tunnel.EnvResolver = (*Platform)(nil)

const (
	// defaultContainerAnnotation names a pod's default container, as for
	// kubectl exec.
	defaultContainerAnnotation = "kubectl.kubernetes.io/default-container"
	// execTimeout bounds the `env -0` in a container.
	execTimeout = 15 * time.Second
)

// envCommand prints the container's environment, each NAME=VALUE ended by
// a NUL, so that values may hold newlines.
var envCommand = []string{"env", "-0"}

// workloadKinds are the workloads --env-from names, by tunnel kind.
var workloadKinds = map[string]struct {
	kind  k8sapi.Kind
	short string // what kubectl calls it, for messages
}{
	tunnel.WorkloadDeployment:  {k8sapi.KindDeployment, "deploy"},
	tunnel.WorkloadStatefulSet: {k8sapi.KindStatefulSet, "statefulset"},
	tunnel.WorkloadDaemonSet:   {k8sapi.KindDaemonSet, "daemonset"},
	tunnel.WorkloadJob:         {k8sapi.KindJob, "job"},
}

// Env reads the environment of a workload of the agent's namespace; see
// tunnel.EnvResolver.
func (p *Platform) Env(ctx context.Context, req tunnel.EnvRequest) (*tunnel.Env, error) {
	if err := checkEnvRequest(req); err != nil {
		return nil, err
	}
	w, err := p.findWorkload(ctx, req)
	if err != nil {
		return nil, err
	}
	c, err := w.container(req.Container)
	if err != nil {
		return nil, err
	}
	links := w.pod.pod.Spec.EnableServiceLinks == nil || *w.pod.pod.Spec.EnableServiceLinks
	services, serviceNote, err := p.serviceEnv(ctx, links)
	if err != nil {
		return nil, err
	}
	resolved, err := resolveEnv(ctx, apiEnvReader{p.c, p.ns}, w.pod, c, services)
	if err != nil {
		return nil, fmt.Errorf("%s, container %s: %w", w.what, c.Name, err)
	}
	env := &tunnel.Env{Workload: fmt.Sprintf("%s: %s, container %s", w.what, w.from, c.Name), Sources: resolved.sources}
	if note := p.addRuntimeEnv(ctx, w, c, resolved); note != "" {
		env.Notes = append(env.Notes, note)
	}
	if serviceNote != "" {
		env.Notes = append(env.Notes, serviceNote)
	}
	for k, v := range resolved.vars {
		env.Vars = append(env.Vars, tunnel.EnvVar{Name: k, Value: v})
	}
	for name, g := range resolved.gaps {
		env.LeftOut = append(env.LeftOut, tunnel.EnvGap{Name: name, Why: g.why, Rule: g.rule})
	}
	sort.Slice(env.LeftOut, func(i, j int) bool { return env.LeftOut[i].Name < env.LeftOut[j].Name })
	for _, u := range resolved.unread {
		why := "every variable of " + u.what + " (envFrom"
		if u.prefix != "" {
			why += ", prefix " + u.prefix
		}
		env.LeftOut = append(env.LeftOut, tunnel.EnvGap{Why: why + ")", Rule: u.rule})
	}
	return env, nil
}

// checkEnvRequest refuses what Kubernetes has no workload for.
func checkEnvRequest(req tunnel.EnvRequest) error {
	if err := tunnel.CheckEnvRequest(req); err != nil {
		return err
	}
	if req.Kind == tunnel.WorkloadService {
		return fmt.Errorf("a Kubernetes Service has no environment: name the workload behind it, e.g. deploy/%s, statefulset/%s or pod/NAME", req.Name, req.Name)
	}
	if !isDNSSubdomain(req.Name) {
		return fmt.Errorf("%q is not a Kubernetes object name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit", req.Name)
	}
	if req.Container != "" && !isDNSLabel(req.Container) {
		return fmt.Errorf("%q is not a container name: at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit", req.Container)
	}
	return nil
}

func isDNSLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func isDNSSubdomain(s string) bool {
	if len(s) > 253 {
		return false
	}
	for _, part := range strings.Split(s, ".") {
		if !isDNSLabel(part) {
			return false
		}
	}
	return true
}

// workload is what an env request names, found.
type workload struct {
	what string // e.g. "deployment/web"
	from string // the pod the values come from, e.g. "pod web-5d9c-x2x9q"
	pod  envPod
}

// findWorkload finds req's workload and the pod its environment is read
// from: for a controller, its running pod (the newest, ready preferred),
// else its pod template.
func (p *Platform) findWorkload(ctx context.Context, req tunnel.EnvRequest) (*workload, error) {
	w := &workload{what: req.Kind + "/" + req.Name}
	absent := func(what string) error {
		return fmt.Errorf("%s does not exist in namespace %s, the agent's: plug reads the workloads of the agent's own namespace only (kubectl -n %s get %s)", what, p.ns, p.ns, strings.TrimSuffix(what, "/"+req.Name))
	}
	if req.Kind == tunnel.WorkloadPod {
		pod, err := p.c.Pods(p.ns).Get(ctx, req.Name)
		switch {
		case k8sapi.IsNotFound(err):
			return nil, absent("pod/" + req.Name)
		case err != nil:
			return nil, p.readError("pods", "get", err)
		}
		w.from = "pod " + pod.Metadata.Name
		if !runs(pod) {
			w.from += " (not running: " + strings.ToLower(orUnknown(pod.Status.Phase)) + ")"
		}
		w.pod = envPod{pod: pod}
		return w, nil
	}
	k, ok := workloadKinds[req.Kind]
	if !ok {
		return nil, fmt.Errorf("plug does not read %s workloads on Kubernetes", req.Kind)
	}
	obj, err := k8sapi.Resources[k8sapi.Workload](p.c, k.kind, p.ns).Get(ctx, req.Name)
	switch {
	case k8sapi.IsNotFound(err):
		return nil, absent(req.Kind + "/" + req.Name)
	case err != nil:
		return nil, p.readError(k.kind.Resource+"."+k.kind.Group, "get", err)
	}
	if pod, err := p.runningPod(ctx, req.Kind, obj); err != nil {
		return nil, err
	} else if pod != nil {
		w.from = "pod " + pod.Metadata.Name
		w.pod = envPod{pod: pod}
		return w, nil
	}
	tmpl := obj.Spec.Template
	tmpl.Metadata.Namespace = p.ns
	w.from = "its pod template (no pod of it runs)"
	w.pod = envPod{pod: &k8sapi.Pod{Metadata: tmpl.Metadata, Spec: tmpl.Spec}, fromTemplate: true}
	return w, nil
}

func orUnknown(s string) string {
	if s == "" {
		return "Unknown"
	}
	return s
}

// runs reports whether a pod is running and not being deleted.
func runs(pod *k8sapi.Pod) bool {
	return pod.Status.Phase == "Running" && pod.Metadata.DeletionTimestamp == nil
}

// runningPod is the pod of workload obj the environment is read from: a
// running one it controls, ready ones first, then the newest; nil when
// none runs.
func (p *Platform) runningPod(ctx context.Context, kind string, obj *k8sapi.Workload) (*k8sapi.Pod, error) {
	selector := obj.Spec.Selector.String()
	if selector == "" {
		return nil, nil // a selector that selects everything cannot tell the workload's pods
	}
	list, err := p.c.Pods(p.ns).List(ctx, k8sapi.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, p.readError("pods", "list", err)
	}
	var best *k8sapi.Pod
	for i := range list.Items {
		pod := &list.Items[i]
		if !runs(pod) || !controlledBy(pod, kind, obj) {
			continue
		}
		if best == nil || pod.Ready() && !best.Ready() ||
			pod.Ready() == best.Ready() && pod.Metadata.CreationTimestamp > best.Metadata.CreationTimestamp {
			best = pod
		}
	}
	return best, nil
}

// controlledBy reports whether pod belongs to workload obj: its
// controller is obj, or for a Deployment, one of obj's ReplicaSets.
func controlledBy(pod *k8sapi.Pod, kind string, obj *k8sapi.Workload) bool {
	for _, o := range pod.Metadata.OwnerReferences {
		if o.Controller == nil || !*o.Controller {
			continue
		}
		if kind == tunnel.WorkloadDeployment {
			return o.Kind == "ReplicaSet" && strings.HasPrefix(o.Name, obj.Metadata.Name+"-")
		}
		return o.UID == obj.Metadata.UID
	}
	return false
}

// container is the container name asks for, or the pod's default one: the
// one its kubectl.kubernetes.io/default-container annotation names, else
// the first.
func (w *workload) container(name string) (*k8sapi.Container, error) {
	spec := &w.pod.pod.Spec
	if len(spec.Containers) == 0 {
		return nil, fmt.Errorf("%s has no containers", w.what)
	}
	explicit := name != ""
	if !explicit {
		name = w.pod.pod.Metadata.Annotations[defaultContainerAnnotation]
	}
	var names []string
	for _, list := range [][]k8sapi.Container{spec.Containers, spec.InitContainers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i], nil
			}
			names = append(names, list[i].Name)
		}
	}
	if !explicit {
		return &spec.Containers[0], nil
	}
	return nil, fmt.Errorf("%s has no container %q; its containers: %s (give one as %s:CONTAINER)", w.what, name, strings.Join(names, ", "), w.what)
}

// readError explains a failed read of resource with verb.
func (p *Platform) readError(resource, verb string, err error) error {
	if k8sapi.IsForbidden(err) {
		return fmt.Errorf("the agent may not %s %s in namespace %s (--env-from needs it): ask the cluster admin to re-apply the agent's manifest; plug doctor prints the one command that grants it", verb, resource, p.ns)
	}
	return err
}

// apiEnvReader reads ConfigMaps and Secrets of namespace ns.
type apiEnvReader struct {
	c  *k8sapi.Client
	ns string
}

func (r apiEnvReader) configMap(ctx context.Context, name string) (*k8sapi.ConfigMap, error) {
	return k8sapi.Resources[k8sapi.ConfigMap](r.c, k8sapi.KindConfigMap, r.ns).Get(ctx, name)
}

func (r apiEnvReader) secret(ctx context.Context, name string) (*k8sapi.Secret, error) {
	return r.c.Secrets(r.ns).Get(ctx, name)
}

// serviceEnv is the service links of a pod of the namespace: those of the
// kubernetes Service of the default namespace, and with links on, those of
// the namespace's Services (whose own "kubernetes" would win). The
// kubernetes Service's come from the agent's own pod (Options); an agent
// outside a pod reads that Service if it may, and otherwise says in note
// that they are missing.
func (p *Platform) serviceEnv(ctx context.Context, links bool) (env map[string]string, note string, err error) {
	var local []k8sapi.Service
	if links {
		list, err := p.c.Services(p.ns).List(ctx, k8sapi.ListOptions{})
		if err != nil {
			return nil, "", p.readError("services", "list", err)
		}
		local = list.Items
	}
	env = map[string]string{}
	own := false
	for _, s := range local {
		own = own || s.Metadata.Name == "kubernetes"
	}
	switch {
	case own:
	case len(p.masterEnv) > 0:
		for k, v := range p.masterEnv {
			env[k] = v
		}
	default:
		s, err := p.c.Services("default").Get(ctx, "kubernetes")
		if err != nil {
			note = "KUBERNETES_SERVICE_HOST and the other variables of the API server's Service are not included: the agent runs outside a pod, and could not read Service default/kubernetes"
			break
		}
		for k, v := range serviceLinkEnv([]k8sapi.Service{*s}) {
			env[k] = v
		}
	}
	for k, v := range serviceLinkEnv(local) {
		env[k] = v
	}
	return env, note, nil
}

// MasterServiceEnv is the part of environ (os.Environ) that the kubelet
// made for the kubernetes Service of the default namespace:
// KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT and the others. Every
// pod has them, so an agent's pod passes its own on to the environments it
// reads.
func MasterServiceEnv(environ []string) map[string]string {
	env := map[string]string{}
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "KUBERNETES_SERVICE_") || k == "KUBERNETES_PORT" || strings.HasPrefix(k, "KUBERNETES_PORT_") {
			env[k] = v
		}
	}
	return env
}

// addRuntimeEnv adds to env what only the running container knows: its
// image's ENV, and what the runtime sets (HOSTNAME, HOME, PATH), from
// `env -0` in the container. The spec's values stand; a variable left out
// for want of a right stays out. It returns one line saying what could not
// be read, or "".
func (p *Platform) addRuntimeEnv(ctx context.Context, w *workload, c *k8sapi.Container, env *containerEnv) string {
	missing := "the image's own ENV (and HOSTNAME, HOME, PATH as the runtime sets them) is not included: "
	switch {
	case w.pod.fromTemplate:
		return missing + "no pod of " + w.what + " runs to read it from"
	case !containerRuns(w.pod.pod, c.Name):
		return missing + "container " + c.Name + " is not running"
	case len(env.unread) > 0:
		return missing + env.unread[0].what + " (envFrom) was not read, so its variables cannot be told from the image's"
	}
	ctx, cancel := context.WithTimeout(ctx, execTimeout)
	defer cancel()
	out, err := p.c.Exec(ctx, p.ns, w.pod.pod.Metadata.Name, c.Name, envCommand, tunnel.MaxEnvBytes)
	var ee *k8sapi.ExecError
	switch {
	case k8sapi.IsForbidden(err):
		return missing + "the agent may not run `env -0` in the container (rules get and create pods/exec)"
	case errors.As(err, &ee):
		return missing + "`env -0` did not run in the container (" + firstLine(ee.Error()) + "); an image without env, such as a distroless one, keeps it to itself"
	case err != nil:
		return missing + "running `env -0` in the container failed: " + firstLine(err.Error())
	}
	for _, kv := range strings.Split(string(out), "\x00") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		if _, ok := env.vars[k]; ok {
			continue
		}
		if g, ok := env.gaps[k]; ok {
			if g.rule != "" {
				continue
			}
			delete(env.gaps, k)
		}
		env.vars[k] = v
	}
	return ""
}

// containerRuns reports whether the pod's status says container name runs.
func containerRuns(pod *k8sapi.Pod, name string) bool {
	for _, s := range append(pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses...) {
		if s.Name == name {
			return s.State.Running != nil
		}
	}
	return false
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return strings.TrimSpace(s)
}
