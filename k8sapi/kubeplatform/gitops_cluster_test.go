package kubeplatform

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// Acceptance 3: Services managed by Argo CD, Flux, Rancher Fleet,
// Crossplane or an operator (an ownerReference with controller: true) are
// recognised before the takeover, and the run is told which controller
// and the remedy with the Service's name and namespace; a Service deployed
// by Helm alone is taken over without a word.
func TestControllersAreRecognisedBeforeTheTakeover(t *testing.T) {
	k := needKube(t)
	owner := k.Kubectl(t, "create", "configmap", "shop-operator-state", "-o", "jsonpath={.metadata.uid}")
	ns := k.Namespace
	for _, tc := range []struct {
		name, meta string
		want       []string // what the run is told, each in one event; none: nothing
	}{
		{"argo", `annotations: {argocd.argoproj.io/tracking-id: "shop:/Service:` + ns + `/argo"}`,
			[]string{"argo is managed by Argo CD (annotation argocd.argoproj.io/tracking-id: shop:/Service:" + ns + "/argo)", "      name: argo\n      namespace: " + ns + "\n"}},
		{"flux", `labels: {kustomize.toolkit.fluxcd.io/name: apps, kustomize.toolkit.fluxcd.io/namespace: flux-system}`,
			[]string{"flux is managed by Flux (label kustomize.toolkit.fluxcd.io/name: apps)", "kustomize.toolkit.fluxcd.io/reconcile: disabled"}},
		{"fleet", `labels: {fleet.cattle.io/bundle-name: shop-fleet}`,
			[]string{"fleet is managed by Rancher Fleet (label fleet.cattle.io/bundle-name: shop-fleet)", "      name: fleet\n      namespace: " + ns + "\n", "comparePatches"}},
		{"crossplane", `labels: {crossplane.io/composite: shop-x7k2}`,
			[]string{"crossplane is managed by Crossplane (label crossplane.io/composite: shop-x7k2)", `managementPolicies: ["Observe"]`}},
		{"operated", `ownerReferences: [{apiVersion: v1, kind: ConfigMap, name: shop-operator-state, uid: "` + owner + `", controller: true}]`,
			[]string{"operated is managed by an operator (ownerReference ConfigMap shop-operator-state (controller: true))", "serve a name it does not own"}},
		{"helm", `labels: {app.kubernetes.io/managed-by: Helm, helm.sh/chart: shop-1.0.0}
  annotations: {meta.helm.sh/release-name: shop, meta.helm.sh/release-namespace: ` + ns + `}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k.Apply(t, fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata:
  name: %s
  %s
spec:
  selector: {app: %s}
  ports: [{port: 80, targetPort: 8080}]
`, tc.name, tc.meta, tc.name))
			p := k.platform(t, "", nil, nil)
			var told tunneltest.Events
			b := k.run("run-"+tc.name, tc.name, 80)
			b.Notify = told.Add
			served, err := p.Serve(bg, b)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Release(bg, b)
			if !served.TookOver {
				t.Fatalf("served %+v, want a takeover", served)
			}
			got := told.Told()
			if tc.want == nil {
				if len(got) > 0 {
					t.Errorf("a Service deployed by Helm alone was flagged: %+v", got)
				}
				return
			}
			if len(got) != 1 || got[0].Kind != tunnel.EventWarning {
				t.Fatalf("told %+v, want one warning", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got[0].Text, w) {
					t.Errorf("the warning lacks %q:\n%s", w, got[0].Text)
				}
			}
		})
	}
}

// Acceptance 1, with the platform alone: a takeover of a Service Argo CD
// manages, changed back while served, is told at once to the run, naming
// Argo CD, with the snippet for this Service; plug does not fight it and
// withdraws its endpoints, so the deployed pods have the name back whole.
func TestChangedBackByArgoCDIsToldAtOnce(t *testing.T) {
	k := needKube(t)
	k.deployWeb(t, 1)
	k.Kubectl(t, "annotate", "service", "web", "argocd.argoproj.io/tracking-id=shop:/Service:"+k.Namespace+"/web")
	p := k.platform(t, "", nil, nil)
	tunneltest.Maintain(t, p)
	var told tunneltest.Events
	b := k.run("run-argo", "web", 80)
	b.Notify = told.Add
	if _, err := p.Serve(bg, b); err != nil {
		t.Fatal(err)
	}
	defer p.Release(bg, b)
	k.eventuallyAnswered(t, "http://web/", "local")

	k.Kubectl(t, "patch", "service", "web", "--type=json", "-p", `[{"op":"add","path":"/spec/selector","value":{"app":"web"}}]`)
	reverted := time.Now()
	clustertest.Eventually(t, 30*time.Second, "the run is told web was changed back by Argo CD", func() error {
		for _, ev := range told.Told() {
			if strings.HasPrefix(ev.Text, "web was changed back by Argo CD (annotation argocd.argoproj.io/tracking-id: shop:/Service:"+k.Namespace+"/web)") {
				if !strings.Contains(ev.Text, "      name: web\n      namespace: "+k.Namespace+"\n") {
					t.Errorf("the warning lacks the snippet for web in %s:\n%s", k.Namespace, ev.Text)
				}
				return nil
			}
		}
		return fmt.Errorf("told %+v", told.Told())
	})
	t.Logf("told %s after the revert", time.Since(reverted).Round(100*time.Millisecond))
	k.eventuallyAnswered(t, "http://web/", "deployed")
	if s := k.slicesOf(t, "web")[ManagedBy]; len(s) != 0 {
		t.Errorf("plug's slices are left after the revert: %v", s)
	}
	svc, err := k.admin.Services(k.Namespace).Get(bg, "web")
	if err != nil || svc.Spec.Selector["app"] != "web" {
		t.Errorf("plug fought the revert: selector %v (%v)", svc.Spec.Selector, err)
	}
	// A Service watch event that follows (the revert's own, the
	// controllers') would tell it again within a few seconds.
	clustertest.Consistently(t, 3*time.Second, "told once that web was changed back", func() error {
		n := 0
		for _, ev := range told.Told() {
			if strings.Contains(ev.Text, "changed back") {
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("told %d times", n)
		}
		return nil
	})
}
