package kubeplatform

import (
	"context"
	"fmt"
	"strings"

	"plug/k8sapi"
	"plug/tunnel"
)

// A continuous-deployment controller keeps a Service equal to what a
// repository declares; a takeover is drift it undoes, usually within
// minutes, and nothing fails on either side. plug reads who manages a
// Service from its metadata before it takes it over, and tells the
// developer which controller it is and the exact remedy, with the
// Service's name and namespace filled in. When the Service is changed back
// during the run, plug says so at once, names the controller, and does
// not fight it: the name goes back to what the controller declares.

// The metadata that says who manages a Service.
const (
	annotationArgoTracking = "argocd.argoproj.io/tracking-id"
	labelInstance          = "app.kubernetes.io/instance"
	keyFluxKustomization   = "kustomize.toolkit.fluxcd.io/name"
	keyFluxKustomizationNS = "kustomize.toolkit.fluxcd.io/namespace"
	keyFluxReconcile       = "kustomize.toolkit.fluxcd.io/reconcile"
	keyFluxHelmRelease     = "helm.toolkit.fluxcd.io/name"
	keyFluxHelmReleaseNS   = "helm.toolkit.fluxcd.io/namespace"
	keyFleetBundle         = "fleet.cattle.io/bundle-name"
	keyFleetBundleNS       = "fleet.cattle.io/bundle-namespace"
	keyCrossplane          = "crossplane.io/composite"
)

// controller is who keeps a Service as declared, as its metadata says.
type controller struct {
	Name   string // "Argo CD", "Flux", "Rancher Fleet", "Crossplane", "an operator"
	Sign   string // the metadata that says so
	Sure   bool   // false when the sign is only a hint
	Remedy string // what keeps it from changing the Service back, filled in
}

// controllerOf reads who manages svc (in namespace ns) from its metadata;
// nil when nothing says a controller reconciles it. The label
// app.kubernetes.io/managed-by: Helm is no sign: Helm acts on an upgrade
// and does not reconcile.
func controllerOf(svc *k8sapi.Service, ns string) *controller {
	name := svc.Metadata.Name
	meta := func(key string) (string, string, bool) {
		if v, ok := svc.Metadata.Annotations[key]; ok {
			return v, "annotation", true
		}
		if v, ok := svc.Metadata.Labels[key]; ok {
			return v, "label", true
		}
		return "", "", false
	}
	sign := func(kind, key, value string) string { return fmt.Sprintf("%s %s: %s", kind, key, value) }

	if v, ok := svc.Metadata.Annotations[annotationArgoTracking]; ok {
		app, _, _ := strings.Cut(v, ":")
		return &controller{Name: "Argo CD", Sign: sign("annotation", annotationArgoTracking, v), Sure: true, Remedy: argoRemedy(app, name, ns)}
	}
	if v, kind, ok := meta(keyFluxKustomization); ok {
		if r, _, _ := meta(keyFluxReconcile); r == "disabled" {
			return nil // Flux was told to leave it alone
		}
		owner, _, _ := meta(keyFluxKustomizationNS)
		return &controller{Name: "Flux", Sign: sign(kind, keyFluxKustomization, v), Sure: true, Remedy: fluxRemedy("Kustomization", v, owner)}
	}
	if v, kind, ok := meta(keyFluxHelmRelease); ok {
		owner, _, _ := meta(keyFluxHelmReleaseNS)
		return &controller{Name: "Flux", Sign: sign(kind, keyFluxHelmRelease, v), Sure: true, Remedy: fluxHelmRemedy(v, owner, name, ns)}
	}
	if v, kind, ok := meta(keyFleetBundle); ok {
		owner, _, _ := meta(keyFleetBundleNS)
		return &controller{Name: "Rancher Fleet", Sign: sign(kind, keyFleetBundle, v), Sure: true, Remedy: fleetRemedy(v, owner, name, ns)}
	}
	if v, kind, ok := meta(keyCrossplane); ok {
		return &controller{Name: "Crossplane", Sign: sign(kind, keyCrossplane, v), Sure: true, Remedy: fmt.Sprintf(
			"If the Service is managed as a Crossplane Object (of the composite %s), switch that Object to\n"+
				"  managementPolicies: [\"Observe\"]\n"+
				"so that it is no longer re-applied.", v)}
	}
	for _, o := range svc.Metadata.OwnerReferences {
		if o.Controller != nil && *o.Controller {
			return &controller{Name: "an operator", Sign: fmt.Sprintf("ownerReference %s %s (controller: true)", o.Kind, o.Name), Sure: true, Remedy: fmt.Sprintf(
				"An operator written in-house rarely offers a way to leave one field alone: suspend the operator that reconciles %s %s for the session (e.g. scale its Deployment to 0), or serve a name it does not own.", o.Kind, o.Name)}
		}
	}
	if v, ok := svc.Metadata.Labels[labelInstance]; ok {
		app := v
		return &controller{Name: "Argo CD", Sign: sign("label", labelInstance, v), Remedy: argoRemedy(app, name, ns)}
	}
	return nil
}

func argoRemedy(app, name, ns string) string {
	where := "the Application"
	if app != "" {
		where = "the Application " + app
	}
	return "Tell " + where + " not to compare spec.selector, the one field a takeover changes (everything else about the Service keeps being reconciled):\n" +
		`spec:
  ignoreDifferences:
    - group: ""
` + serviceRef("      ", name, ns) + `      jsonPointers:
        - /spec/selector
` + "Where plug is used routinely, set it once for every Service in the argocd-cm ConfigMap (namespace argocd):\n" +
		`data:
  resource.customizations.ignoreDifferences._Service: |
    jsonPointers:
      - /spec/selector
` + "For a one-off, turning Self Heal off also works, but it suspends drift correction for the whole Application."
}

func fluxRemedy(kind, owner, ownerNS string) string {
	return "Tell Flux to leave the Service alone: on the Service in your repository (or through a spec.patches entry of " + theObject(kind, owner, ownerNS) + "):\n" +
		`metadata:
  annotations:
    kustomize.toolkit.fluxcd.io/reconcile: disabled
` + "This stops Flux reconciling the whole Service, not only spec.selector, the one field a takeover changes."
}

func fluxHelmRemedy(release, releaseNS, name, ns string) string {
	return "Flux's helm-controller corrects drift when " + theObject("HelmRelease", release, releaseNS) + " has spec.driftDetection.mode: enabled. Tell it to ignore spec.selector, the one field a takeover changes:\n" +
		`spec:
  driftDetection:
    ignore:
      - paths: ["/spec/selector"]
        target:
` + serviceRef("          ", name, ns) + "or put the annotation kustomize.toolkit.fluxcd.io/reconcile: disabled on the Service in the chart."
}

func fleetRemedy(bundle, bundleNS, name, ns string) string {
	return "Fleet compares with the patches declared in the fleet.yaml of " + theObject("bundle", bundle, bundleNS) + "; add:\n" +
		`diff:
  comparePatches:
    - apiVersion: v1
` + serviceRef("      ", name, ns) + `      operations:
        - op: remove
          path: /spec/selector`
}

// serviceRef is the YAML naming the Service name in namespace ns, each line
// indented by indent, for the remedies above.
func serviceRef(indent, name, ns string) string {
	return indent + "kind: Service\n" + indent + "name: " + name + "\n" + indent + "namespace: " + ns + "\n"
}

// managedWarning is what the developer is told before plug takes over svc
// that c manages.
func managedWarning(c *controller, name string) tunnel.Event {
	if !c.Sure {
		return tunnel.Event{Name: name, Kind: tunnel.EventInfo, Text: fmt.Sprintf(
			"%s carries the %s, which is only a hint of Argo CD: Helm sets that label on everything, and Argo CD uses it only when it tracks resources by label (the annotation %s is the reliable sign, and %s has none). "+
				"If Argo CD does manage %s, it will change it back within minutes and the name will stop reaching this run. %s",
			name, c.Sign, annotationArgoTracking, name, name, c.Remedy)}
	}
	return tunnel.Event{Name: name, Kind: tunnel.EventWarning, Text: fmt.Sprintf(
		"%s is managed by %s (%s): it will likely change %s's selector and ports back within minutes, and the name then stops reaching this run; plug warns when it does. %s",
		name, c.Name, c.Sign, name, c.Remedy)}
}

// warnManaged tells b's run who manages svc, if anyone, as plug takes it
// over.
func (p *Platform) warnManaged(svc *k8sapi.Service, b tunnel.Binding) {
	c := controllerOf(svc, p.ns)
	if c == nil || b.Notify == nil {
		return
	}
	p.logf("%s: managed by %s (%s)", b.Name, c.Name, c.Sign)
	b.Notify(managedWarning(c, b.Name))
}

// changedBack handles a taken-over Service whose selector someone put
// back while it was served: the run is told at once who did it, if the
// metadata says, and how to keep it from happening; plug does not fight
// the change, and withdraws its own endpoints so that the name is wholly
// what was declared again (the path proof then says whether it is
// answered by the deployed pods or by nothing). It tells the run once.
func (p *Platform) changedBack(ctx context.Context, svc *k8sapi.Service, h *holding) {
	name := svc.Metadata.Name
	if !p.markReverted(name) {
		return
	}
	who, remedy := "someone else (no controller plug knows of is named in its metadata: a kubectl apply, a Helm upgrade, a script?)", ""
	if c := controllerOf(svc, p.ns); c != nil && c.Sure {
		who, remedy = fmt.Sprintf("%s (%s)", c.Name, c.Sign), " To keep the name for the next run: "+c.Remedy
	}
	p.logf("%s: its selector was put back by %s while served; plug's endpoints withdrawn", name, who)
	if err := p.deletePlugSlices(ctx, name); err != nil {
		p.logf("%s: withdrawing plug's endpoints: %v", name, err)
	}
	notify(h, tunnel.Event{Name: name, Kind: tunnel.EventWarning, Text: fmt.Sprintf(
		"%s was changed back by %s: its selector %s is back, so the deployed pods answer the name again, not this run. plug does not fight that change.%s",
		name, who, selectorString(svc.Spec.Selector), remedy)})
	notify(h, tunnel.Event{Name: name, Kind: tunnel.EventPathChanged})
}

// takenAgain notes that name, changed back before, has no selector again
// (its change was undone by hand): plug writes its endpoints again, and a
// next change back is told again.
func (p *Platform) takenAgain(name string) {
	p.mu.Lock()
	h := p.held[name]
	again := h != nil && h.reverted
	if again {
		h.reverted = false
	}
	p.mu.Unlock()
	if again {
		p.logf("%s: its selector is gone again: plug's endpoints are written again", name)
	}
}

// theObject names a controller's object for a remedy: "the KIND NAME", with
// its namespace when it is known.
func theObject(kind, name, ns string) string {
	of := "the " + kind + " " + name
	if ns != "" {
		of += " (namespace " + ns + ")"
	}
	return of
}
