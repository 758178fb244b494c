package kubeplatform

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"plug/k8sapi"
	"plug/tunnel"
)

// RoleName is the Role deploy/plug-k8s.yaml grants the agent.
const RoleName = "plug"

// StateSecret is the Secret holding what the agent replicas share.
const StateSecret = "plug-state"

// rule is a set of RBAC verbs on one resource, and the feature behind it.
// A resource may name a subresource, e.g. "pods/exec".
type rule struct {
	group, resource, name string
	verbs                 []string
	feature               string
	required              bool
}

// envFeature is what the --env-from rules are for.
const envFeature = "--env-from: a workload's environment"

// rules are every permission the agent's features use; deploy/plug-k8s.yaml
// grants each, and deploy/README.md explains each.
var rules = []rule{
	{"", "services", "", []string{"get", "list", "create", "patch", "delete"},
		"-s: create a name, take over a deployed Service and restore it, sweep receipts", true},
	{"", "services", "", []string{"watch"},
		"the names runs reach (-c), kept current as Services come and go; -s: see at once when a served Service is changed back", true},
	{"discovery.k8s.io", "endpointslices", "", []string{"create", "delete", "list", "update"},
		"-s: point a served name at the agent pod holding the run, and remove the controllers' stale slices", true},
	{"", "endpoints", "", []string{"delete"},
		"-s: remove the legacy Endpoints of a taken-over Service, or kube-proxy splits its traffic", true},
	{"", "pods", "", []string{"get", "list"},
		"-s: find the deployed pods answering the ports a run does not serve; sweep: is a holder's agent pod still there", true},
	{"", "endpoints", "", []string{"patch"},
		"-s: keep the mirroring controller from copying a taken-over Service's legacy Endpoints into a slice, which kube-proxy would split its traffic with for about a second", false},
	{"discovery.k8s.io", "endpointslices", "", []string{"watch"},
		"-s: remove a controller's stale slice at once rather than within the heartbeat period", false},
	{"", "pods", "", []string{"watch"},
		"-s: follow the deployed pods behind unserved ports at once rather than within the heartbeat period", false},
	{"", "secrets", StateSecret, []string{"get", "patch"},
		"one SSH host key shared by every agent replica and kept across restarts", false},
	{"", "secrets", MembersSecret, []string{"get", "list", "watch", "patch"},
		"admission by approval (PLUG_ADMISSION=invite): the members, the pending requests and the admins, followed at once by every replica", false},
	{"coordination.k8s.io", "leases", "", []string{"create", "patch", "delete", "list", "watch"},
		"plug who and plug end across replicas: a Lease per run per agent pod, renewed while the run lasts", false},
	{"", "events", "", []string{"create"},
		"-s: an Event on each Service a run takes over and gives back, for kubectl describe svc", false},
	{"apps", "deployments", "", []string{"get"}, envFeature + ": find deploy/NAME", false},
	{"apps", "statefulsets", "", []string{"get"}, envFeature + ": find statefulset/NAME", false},
	{"apps", "daemonsets", "", []string{"get"}, envFeature + ": find daemonset/NAME", false},
	{"batch", "jobs", "", []string{"get"}, envFeature + ": find job/NAME", false},
	{"", "configmaps", "", []string{"get"}, envFeature + ": the values it takes from ConfigMaps", false},
	{"", "secrets", "", []string{"get"},
		envFeature + ": the values it takes from Secrets; without it they are left out, each named", false},
	{"", "pods/exec", "", []string{"get", "create"},
		envFeature + ": the image's own ENV, read with `env -0` in the running container; " + volumeFeature + ": the uid of the workload's process", false},
	{"", "pods", "", []string{"create", "delete"}, volumeFeature + ": the helper pod serving the volume, removed when the run ends", false},
	{"", "persistentvolumeclaims", "", []string{"get"},
		volumeFeature + ": a claim's access modes (ReadWriteMany helpers may run on any node); without it the helper runs on the workload's node", false},
}

// volumeFeature is what the --volume rules are for.
const volumeFeature = "--volume: a workload's volume on the laptop"

// Rights checks every rule with a SelfSubjectAccessReview, and the rule
// on the agent's own Deployment (plug update --agent) when it has one; see
// tunnel.Platform. Each missing right comes with the one command that
// grants it alone.
func (p *Platform) Rights(ctx context.Context) ([]tunnel.Right, error) {
	var out []tunnel.Right
	all := append(slices.Clip(rules), auditRules()...)
	if p.deployment != "" {
		all = append(all, p.updateRule())
	}
	for _, rl := range all {
		for _, verb := range rl.verbs {
			resource, sub, _ := strings.Cut(rl.resource, "/")
			ok, err := p.c.CanI(ctx, k8sapi.ResourceAttributes{
				Namespace: p.ns, Verb: verb, Group: rl.group, Resource: resource, Subresource: sub, Name: rl.name,
			})
			if err != nil {
				return nil, fmt.Errorf("checking the agent's rights: %w", err)
			}
			out = append(out, tunnel.Right{
				Rule: rl.text(verb), Feature: rl.feature, Required: rl.required, Granted: ok, Fix: rl.fix(p.ns, verb),
			})
		}
	}
	for _, ns := range p.offered {
		for _, verb := range []string{"list", "watch"} {
			ok, err := p.c.CanI(ctx, k8sapi.ResourceAttributes{Namespace: ns, Verb: verb, Resource: "services"})
			if err != nil {
				return nil, fmt.Errorf("checking the agent's rights: %w", err)
			}
			out = append(out, tunnel.Right{
				Rule: verb + " services in namespace " + ns, Granted: ok, Fix: p.offerCommand(ns),
				Feature: "-c: the names of namespace " + ns + " (PLUG_NAMESPACES), offered by the Role and RoleBinding " + NamespacesRole + " there",
			})
		}
	}
	return append(out, p.helperAdmission(ctx, out)...), nil
}

// text names the rule for one verb, e.g. "patch services",
// "get secrets/plug-state" or "create pods/exec".
func (rl rule) text(verb string) string {
	res := rl.resource
	if rl.group != "" {
		res += "." + rl.group
	}
	if rl.name != "" {
		res += "/" + rl.name
	}
	return verb + " " + res
}

// fix is the kubectl command adding to the agent's Role the one rule that
// grants verb.
func (rl rule) fix(ns, verb string) string {
	value := map[string]any{"apiGroups": []string{rl.group}, "resources": []string{rl.resource}, "verbs": []string{verb}}
	if rl.name != "" {
		value["resourceNames"] = []string{rl.name}
	}
	patch, _ := json.Marshal([]map[string]any{{"op": "add", "path": "/rules/-", "value": value}})
	return fmt.Sprintf("kubectl -n %s patch role %s --type=json -p '%s'", ns, RoleName, strings.ReplaceAll(string(patch), "'", `'\''`))
}
