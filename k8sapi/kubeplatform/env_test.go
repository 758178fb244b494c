package kubeplatform

import (
	"fmt"
	"strings"
	"testing"

	"plug/k8sapi"
	"plug/tunnel"
	"plug/tunnel/tunneltest"
)

// envDeployment writes Deployment web (uid web-uid) whose container app
// takes CONFIG from ConfigMap cfg, PASSWORD from Secret db and POD from
// the downward API, with a sidecar; and ConfigMap cfg and Secret db.
func (f *fakeKube) envDeployment(t *testing.T) {
	t.Helper()
	f.create(t, k8sapi.KindConfigMap, `{"metadata": {"name": "cfg"}, "data": {"CONFIG": "from-cfg"}}`)
	f.create(t, k8sapi.KindSecret, `{"metadata": {"name": "db"}, "data": {"password": "czNjcjN0"}}`)
	f.create(t, k8sapi.KindDeployment, `{"metadata": {"name": "web", "uid": "web-uid"}, "spec": {
		"selector": {"matchLabels": {"app": "web"}},
		"template": {"metadata": {"labels": {"app": "web"}}, "spec": {"enableServiceLinks": false, "containers": [
			{"name": "app", "env": [
				{"name": "CONFIG", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "CONFIG"}}},
				{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
				{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
				{"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}}]},
			{"name": "sidecar", "env": [{"name": "SIDE", "value": "car"}]}]}}}}`)
}

// envPodOf writes a running pod of web's template, controlled by
// ReplicaSet rs, created at created.
func (f *fakeKube) envPodOf(t *testing.T, name, rs, created string, ready bool) {
	t.Helper()
	f.create(t, k8sapi.KindPod, fmt.Sprintf(`{"metadata": {"name": %q, "labels": {"app": "web"}, "creationTimestamp": %q,
		"ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": %q, "uid": "rs-uid", "controller": true}]},
		"spec": {"nodeName": %q, "enableServiceLinks": false, "containers": [
			{"name": "app", "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]},
			{"name": "sidecar"}]},
		"status": {"phase": "Running", "podIP": "10.1.0.9", "conditions": [{"type": "Ready", "status": "%v"}]}}`, name, created, rs, fakeNode, map[bool]string{true: "True", false: "False"}[ready]))
}

func envOf(t *testing.T, p *Platform, req tunnel.EnvRequest) *tunnel.Env {
	t.Helper()
	e, err := p.Env(bg, req)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// With no pod running, the environment is the template's, what only a pod
// knows is left out with its reason, and the image's ENV is said to be
// missing; with pods, it is the ready one's, the newest, and only a pod
// the Deployment's ReplicaSets control.
func TestEnvOfADeploymentFromItsTemplateOrItsPod(t *testing.T) {
	f := newFakeKube(t)
	f.envDeployment(t)
	p := f.platform(t, "", func(o *Options) { o.MasterServiceEnv = map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1"} })
	web := tunnel.EnvRequest{Kind: tunnel.WorkloadDeployment, Name: "web"}

	e := envOf(t, p, web)
	if got := tunneltest.EnvVars(e); got["CONFIG"] != "from-cfg" || got["PASSWORD"] != "s3cr3t" || got["APP"] != "web" || got["KUBERNETES_SERVICE_HOST"] != "10.96.0.1" || len(got) != 4 {
		t.Errorf("from the template: %v", got)
	}
	if got := fmt.Sprint(e.Sources); got != "[{ConfigMap cfg [CONFIG]} {Secret db [password]}]" {
		t.Errorf("the sources read, for the audit trail: %s", got)
	}
	if e.Workload != "deployment/web: its pod template (no pod of it runs), container app" {
		t.Errorf("workload %q", e.Workload)
	}
	if len(e.LeftOut) != 1 || e.LeftOut[0].Name != "POD" || !strings.Contains(e.LeftOut[0].Why, "no pod of the workload runs") || e.LeftOut[0].Rule != "" {
		t.Errorf("left out %+v", e.LeftOut)
	}
	if len(e.Notes) != 1 || !strings.Contains(e.Notes[0], "no pod of deployment/web runs") {
		t.Errorf("notes %q", e.Notes)
	}

	f.envPodOf(t, "web-old-1", "web-5d9c4", "2026-01-01T10:00:00Z", true)
	f.envPodOf(t, "web-new-1", "web-7f8b2", "2026-01-01T11:00:00Z", true)
	f.envPodOf(t, "web-new-2", "web-7f8b2", "2026-01-01T12:00:00Z", false) // not ready yet
	f.envPodOf(t, "webshop-1", "other-1", "2026-01-01T13:00:00Z", true)    // the same labels, another owner
	e = envOf(t, p, web)
	if got := tunneltest.EnvVars(e); got["POD"] != "web-new-1" {
		t.Errorf("from the pods: %v (%s)", got, e.Workload)
	}
	if !strings.HasPrefix(e.Workload, "deployment/web: pod web-new-1, container app") {
		t.Errorf("workload %q", e.Workload)
	}
	if len(e.Notes) != 1 || !strings.Contains(e.Notes[0], "container app is not running") {
		t.Errorf("notes %q", e.Notes)
	}
	side := envOf(t, p, tunnel.EnvRequest{Kind: tunnel.WorkloadPod, Name: "web-new-1", Container: "sidecar"})
	if len(side.Vars) != 1 || side.Vars[0].Name != "KUBERNETES_SERVICE_HOST" {
		t.Errorf("pod/web-new-1:sidecar: %v", side.Vars)
	}
}

// Without the right to read Secrets the variables from them are left out,
// naming the rule; a workload or container that does not exist, a kind
// the agent may not read, and names Kubernetes has no object of, are
// refused, saying what to do.
func TestEnvRefusalsAndMissingRights(t *testing.T) {
	f := newFakeKube(t)
	f.envDeployment(t)
	f.Allow(func(a k8sapi.ResourceAttributes) bool { return a.Resource != "secrets" && a.Resource != "statefulsets" })
	p := f.platform(t, "", nil)

	e := envOf(t, p, tunnel.EnvRequest{Kind: tunnel.WorkloadDeployment, Name: "web"})
	if _, ok := tunneltest.EnvVars(e)["PASSWORD"]; ok || len(e.LeftOut) != 2 {
		t.Fatalf("vars %v, left out %+v", tunneltest.EnvVars(e), e.LeftOut)
	}
	if g := e.LeftOut[0]; g.Name != "PASSWORD" || g.Rule != "get secrets" || g.Why != `Secret "db", key "password"` {
		t.Errorf("left out %+v", g)
	}
	if !strings.Contains(strings.Join(e.Notes, "\n"), "could not read Service default/kubernetes") {
		t.Errorf("notes %q", e.Notes)
	}

	for _, tc := range []struct {
		req  tunnel.EnvRequest
		want string
	}{
		{tunnel.EnvRequest{Kind: tunnel.WorkloadDeployment, Name: "nope"}, "deployment/nope does not exist in namespace shop, the agent's"},
		{tunnel.EnvRequest{Kind: tunnel.WorkloadJob, Name: "web"}, "job/web does not exist in namespace shop"},
		{tunnel.EnvRequest{Kind: tunnel.WorkloadPod, Name: "web-1"}, "pod/web-1 does not exist in namespace shop"},
		{tunnel.EnvRequest{Kind: tunnel.WorkloadDeployment, Name: "web", Container: "db"}, `deployment/web has no container "db"; its containers: app, sidecar`},
		{tunnel.EnvRequest{Kind: tunnel.WorkloadStatefulSet, Name: "web"}, "the agent may not get statefulsets.apps in namespace shop"},
		{tunnel.EnvRequest{Kind: tunnel.WorkloadService, Name: "web"}, "a Kubernetes Service has no environment: name the workload behind it"},
		{tunnel.EnvRequest{Kind: tunnel.WorkloadDeployment, Name: "Web"}, "is not a Kubernetes object name"},
		{tunnel.EnvRequest{Kind: tunnel.WorkloadDeployment, Name: "web", Container: "App"}, "is not a container name"},
	} {
		if _, err := p.Env(bg, tc.req); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.req, err, tc.want)
		}
	}
}
