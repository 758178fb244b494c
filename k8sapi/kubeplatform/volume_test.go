package kubeplatform

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"plug/k8sapi"
)

func TestParseStatus(t *testing.T) {
	status := "Name:\tapp\nUid:\t1000650000\t1000650001\t1000650000\t1000650000\nGid:\t0\t5\t0\t0\nGroups:\t5 7\n"
	uid, gid, ok := parseStatus(status)
	if !ok || uid != 1000650001 || gid != 5 {
		t.Errorf("parseStatus = %d, %d, %v; want the effective ids 1000650001, 5", uid, gid, ok)
	}
	for _, bad := range []string{"", "Uid:\t1\n", "Uid:\tx\tx\nGid:\t1\t1\n", "Uid:\t1\t-1\nGid:\t1\t1\n"} {
		if _, _, ok := parseStatus(bad); ok {
			t.Errorf("parseStatus(%q) is ok", bad)
		}
	}
}

// templateOf is a workload with no running pod whose template has the
// volumes given as JSON and a container mounting each.
func templateOf(t *testing.T, volumes string, sc *k8sapi.PodSecurityContext) *workload {
	t.Helper()
	var spec k8sapi.PodSpec
	if err := json.Unmarshal([]byte(`{"containers":[{"name":"app","volumeMounts":[{"name":"cfg","mountPath":"/c"},{"name":"tmp","mountPath":"/t"},{"name":"ro","mountPath":"/r","readOnly":true}]}],"volumes":`+volumes+`}`), &spec); err != nil {
		t.Fatal(err)
	}
	spec.SecurityContext = sc
	return &workload{what: "deployment/web", pod: envPod{pod: &k8sapi.Pod{Spec: spec}, fromTemplate: true}}
}

func TestPlanHelper(t *testing.T) {
	p := &Platform{ns: "dev"}
	uid, fs := int64(1000650000), int64(2000)
	w := templateOf(t, `[{"name":"cfg","configMap":{"name":"settings"}},{"name":"tmp","emptyDir":{}},{"name":"ro","nfs":{"server":"n","path":"/x"}},{"name":"eph","ephemeral":{}}]`,
		&k8sapi.PodSecurityContext{RunAsUser: &uid, FSGroup: &fs})

	plan, err := p.planHelper(context.Background(), w, "cfg")
	if err != nil || !plan.readOnly || plan.uid == nil || *plan.uid != uid || !strings.Contains(plan.detail, "ConfigMap, read-only, as uid 1000650000 fsGroup 2000 (from its securityContext)") {
		t.Errorf("a ConfigMap: %+v, %v", plan, err)
	}
	pod := plan.pod("plug-vol-1", "plug:dev", "", "u", "p", map[string]string{LabelVolume: "plug-vol-1"}, "uid-1")
	raw, _ := json.Marshal(pod)
	for _, want := range []string{`"runAsNonRoot":true`, `"runAsUser":1000650000`, `"fsGroup":2000`, `"drop":["ALL"]`, `"allowPrivilegeEscalation":false`, `"configMap":{"name":"settings"}`, `"readOnly":true`, `"RuntimeDefault"`,
		`"limits":{"memory":"192Mi"}`, `{"name":"GOMEMLIMIT","value":"96MiB"}`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("the helper pod lacks %s: %s", want, raw)
		}
	}
	if strings.Contains(string(raw), `"add"`) {
		t.Errorf("the helper of a non-root workload adds a capability: %s", raw)
	}
	// No ServiceAccount token, and the namespace's default account only.
	spec := pod["spec"].(map[string]any)
	if spec["automountServiceAccountToken"] != false || spec["serviceAccountName"] != "default" {
		t.Errorf("the helper pod's identity: serviceAccountName %v, automountServiceAccountToken %v", spec["serviceAccountName"], spec["automountServiceAccountToken"])
	}
	if err := helperIdentity(pod); err != nil {
		t.Errorf("the helper pod is refused: %v", err)
	}
	for _, change := range []func(map[string]any){
		func(s map[string]any) { s["serviceAccountName"] = "deployer" },
		func(s map[string]any) { s["serviceAccount"] = "deployer" },
		func(s map[string]any) { s["automountServiceAccountToken"] = true },
		func(s map[string]any) { delete(s, "automountServiceAccountToken") },
	} {
		changed := maps.Clone(spec)
		change(changed)
		if err := helperIdentity(map[string]any{"spec": changed}); err == nil || !strings.Contains(err.Error(), `must run as the ServiceAccount "default" with automountServiceAccountToken false`) {
			t.Errorf("a helper pod with %v: %v", changed, err)
		}
	}

	if plan, err := p.planHelper(context.Background(), w, "ro"); err != nil || !plan.readOnly {
		t.Errorf("a volume mounted readOnly: %+v, %v", plan, err)
	}
	for _, c := range []struct{ volume, why string }{
		{"tmp", "an emptyDir lives and dies with its pod"},
		{"eph", "a generic ephemeral volume belongs to its pod"},
		{"nope", `has no volume "nope"; its volumes: cfg, tmp, ro, eph`},
	} {
		if _, err := p.planHelper(context.Background(), w, c.volume); err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: %v, want %q", c.volume, err, c.why)
		}
	}

	// No uid anywhere: the helper starts as root with SETUID and SETGID.
	w = templateOf(t, `[{"name":"cfg","secret":{"secretName":"s"}}]`, nil)
	plan, err = p.planHelper(context.Background(), w, "cfg")
	if err != nil || plan.uid != nil || !strings.Contains(plan.detail, "could be read nowhere") {
		t.Fatalf("no uid: %+v, %v", plan, err)
	}
	raw, _ = json.Marshal(plan.pod("plug-vol-1", "plug:dev", "", "u", "p", nil, "uid-1"))
	for _, want := range []string{`"runAsUser":0`, `"add":["SETUID","SETGID"]`, `"--as-owner"`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("the root helper lacks %s: %s", want, raw)
		}
	}
}
