package kubeplatform

import (
	"strings"
	"testing"

	"plug/k8sapi"
	"plug/tunnel"
)

func service(labels, annotations map[string]string, owners ...k8sapi.OwnerReference) *k8sapi.Service {
	return &k8sapi.Service{Metadata: k8sapi.ObjectMeta{Name: "web", Labels: labels, Annotations: annotations, OwnerReferences: owners}}
}

// Who manages a Service is read from its metadata, with the remedy filled
// in with its name and namespace; Helm alone manages nothing plug must
// know of, and the instance label is only a hint.
func TestControllerOfAServiceFromItsMetadata(t *testing.T) {
	yes := true
	for _, tc := range []struct {
		what string
		svc  *k8sapi.Service
		name string // "" when no controller is expected
		sure bool
		want []string // in the remedy
	}{
		{"Argo CD", service(nil, map[string]string{annotationArgoTracking: "shop:/Service:team-a/web"}), "Argo CD", true,
			[]string{"the Application shop", "      name: web\n      namespace: team-a\n", "- /spec/selector", "resource.customizations.ignoreDifferences._Service: |", "Self Heal"}},
		{"Flux Kustomization", service(map[string]string{keyFluxKustomization: "apps", keyFluxKustomizationNS: "flux-system"}, nil), "Flux", true,
			[]string{"kustomize.toolkit.fluxcd.io/reconcile: disabled", "the Kustomization apps (namespace flux-system)"}},
		{"Flux told to leave it alone", service(map[string]string{keyFluxKustomization: "apps"}, map[string]string{keyFluxReconcile: "disabled"}), "", false, nil},
		{"Flux HelmRelease", service(map[string]string{keyFluxHelmRelease: "web", keyFluxHelmReleaseNS: "team-a"}, nil), "Flux", true,
			[]string{"driftDetection", "kind: Service\n          name: web\n          namespace: team-a\n", "kustomize.toolkit.fluxcd.io/reconcile: disabled"}},
		{"Rancher Fleet", service(map[string]string{keyFleetBundle: "shop-web"}, nil), "Rancher Fleet", true,
			[]string{"fleet.yaml of the bundle shop-web", "comparePatches:", "      name: web\n      namespace: team-a\n", "path: /spec/selector"}},
		{"Crossplane", service(map[string]string{keyCrossplane: "shop-x7k2"}, nil), "Crossplane", true,
			[]string{`managementPolicies: ["Observe"]`, "shop-x7k2"}},
		{"an operator", service(nil, nil, k8sapi.OwnerReference{Kind: "Shop", Name: "main", Controller: &yes}), "an operator", true,
			[]string{"suspend the operator that reconciles Shop main", "serve a name it does not own"}},
		{"an owner that is not a controller", service(nil, nil, k8sapi.OwnerReference{Kind: "Shop", Name: "main"}), "", false, nil},
		{"Helm alone", service(map[string]string{"app.kubernetes.io/managed-by": "Helm", "helm.sh/chart": "web-1.0"}, map[string]string{"meta.helm.sh/release-name": "web"}), "", false, nil},
		{"the instance label alone", service(map[string]string{labelInstance: "shop", "app.kubernetes.io/managed-by": "Helm"}, nil), "Argo CD", false,
			[]string{"the Application shop", "      name: web\n      namespace: team-a\n"}},
	} {
		c := controllerOf(tc.svc, "team-a")
		if tc.name == "" {
			if c != nil {
				t.Errorf("%s: taken for %s (%s)", tc.what, c.Name, c.Sign)
			}
			continue
		}
		if c == nil || c.Name != tc.name || c.Sure != tc.sure {
			t.Errorf("%s: got %+v, want %s (sure %t)", tc.what, c, tc.name, tc.sure)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(c.Remedy, w) {
				t.Errorf("%s: the remedy lacks %q:\n%s", tc.what, w, c.Remedy)
			}
		}
		// A takeover changes the selector only: the remedy ignores no more.
		if strings.Contains(c.Remedy, "/spec/ports") || strings.Contains(c.Remedy, "two fields") {
			t.Errorf("%s: the remedy names more than spec.selector:\n%s", tc.what, c.Remedy)
		}
	}
}

// The warning before a takeover names the controller and what says so;
// the instance label alone is said to be only a hint.
func TestManagedWarningWords(t *testing.T) {
	argo := controllerOf(service(nil, map[string]string{annotationArgoTracking: "shop:/Service:team-a/web"}), "team-a")
	e := managedWarning(argo, "web")
	if e.Kind != tunnel.EventWarning || !strings.HasPrefix(e.Text, "web is managed by Argo CD (annotation argocd.argoproj.io/tracking-id: shop:/Service:team-a/web)") {
		t.Errorf("Argo CD: %+v", e)
	}
	hint := controllerOf(service(map[string]string{labelInstance: "shop"}, nil), "team-a")
	e = managedWarning(hint, "web")
	if e.Kind != tunnel.EventInfo || !strings.Contains(e.Text, "only a hint of Argo CD") || !strings.Contains(e.Text, "If Argo CD does manage web") {
		t.Errorf("the instance label: %+v", e)
	}
}
