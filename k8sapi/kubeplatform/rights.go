package kubeplatform

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"plug/k8sapi"
	"plug/tunnel"
)

// RoleName is the Role deploy/plug-k8s.yaml grants the agent.
const RoleName = "plug"

// StateSecret is the Secret holding what the agent replicas share.
const StateSecret = "plug-state"

// rule is a set of RBAC verbs on one resource, and the feature behind it.
type rule struct {
	group, resource, name string
	verbs                 []string
	feature               string
	required              bool
}

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
	{"discovery.k8s.io", "endpointslices", "", []string{"watch"},
		"-s: remove a controller's stale slice at once rather than within the heartbeat period", false},
	{"", "pods", "", []string{"watch"},
		"-s: follow the deployed pods behind unserved ports at once rather than within the heartbeat period", false},
	{"", "secrets", StateSecret, []string{"get", "patch"},
		"one SSH host key shared by every agent replica and kept across restarts", false},
}

// Rights checks every rule with a SelfSubjectAccessReview; see
// tunnel.Platform. Each missing right comes with the one command that
// grants it alone.
func (p *Platform) Rights(ctx context.Context) ([]tunnel.Right, error) {
	var out []tunnel.Right
	for _, rl := range rules {
		for _, verb := range rl.verbs {
			ok, err := p.c.CanI(ctx, k8sapi.ResourceAttributes{
				Namespace: p.ns, Verb: verb, Group: rl.group, Resource: rl.resource, Name: rl.name,
			})
			if err != nil {
				return nil, fmt.Errorf("checking the agent's rights: %w", err)
			}
			out = append(out, tunnel.Right{
				Rule: rl.text(verb), Feature: rl.feature, Required: rl.required, Granted: ok, Fix: rl.fix(p.ns, verb),
			})
		}
	}
	return out, nil
}

// text names the rule for one verb, e.g. "patch services" or
// "get secrets/plug-state".
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
