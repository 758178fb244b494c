package kubeplatform

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"plug/k8sapi"
	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

var bg = context.Background()

// Acceptance 1: a new name reaches the run by its short and its full name;
// after the run ends, the Service and its slice are gone.
func TestNewNameReachesTheRunAndIsGoneAfter(t *testing.T) {
	k := needKube(t)
	k.deployWeb(t, 1) // for the client pod
	p := k.platform(t, "", nil, nil)
	b := k.run("run-1", "fresh", 8080)

	served, err := p.Serve(bg, b)
	if err != nil {
		t.Fatal(err)
	}
	if served.TookOver {
		t.Errorf("Serve of a new name says it took over: %+v", served)
	}
	svc, err := k.admin.Services(k.Namespace).Get(bg, "fresh")
	if err != nil {
		t.Fatal(err)
	}
	if svc.Metadata.Labels[LabelManagedBy] != ManagedBy || len(svc.Spec.Selector) != 0 || svc.Metadata.Annotations[AnnotationReceipt] == "" {
		t.Errorf("the new Service: labels %v, selector %v, annotations %v", svc.Metadata.Labels, svc.Spec.Selector, svc.Metadata.Annotations)
	}
	k.eventuallyAnswered(t, "http://fresh:8080/", "local")
	k.eventuallyAnswered(t, fmt.Sprintf("http://fresh.%s.svc.cluster.local:8080/", k.Namespace), "local")

	if err := p.Release(bg, b); err != nil {
		t.Fatal(err)
	}
	if _, err := k.admin.Services(k.Namespace).Get(bg, "fresh"); !k8sapi.IsNotFound(err) {
		t.Errorf("after the run, the Service: %v, want NotFound", err)
	}
	if s := k.slicesOf(t, "fresh"); len(s) != 0 {
		t.Errorf("after the run, slices are left: %v", s)
	}
	if err := p.Release(bg, b); err != nil {
		t.Errorf("releasing twice: %v", err)
	}
}

// Acceptance 2: a takeover keeps the ClusterIP, sends 20/20 new
// connections to the run, and afterwards 20/20 to the deployed pods, with
// the Service exactly as it was.
func TestTakeoverReroutesAndRestoresExactly(t *testing.T) {
	k := needKube(t)
	k.deployWeb(t, 2)
	k.eventuallyAnswered(t, "http://web/", "deployed")
	before := k.snapshot(t, "web")
	p := k.platform(t, "", nil, nil)
	tunneltest.Maintain(t, p)
	b := k.run("run-1", "web", 80)

	served, err := p.Serve(bg, b)
	if err != nil {
		t.Fatal(err)
	}
	if !served.TookOver || !strings.Contains(served.Detail, "parked") {
		t.Errorf("Serve: %+v, want a takeover saying the deployed web is parked", served)
	}
	during := k.snapshot(t, "web")
	if during.spec.(map[string]any)["clusterIP"] != before.spec.(map[string]any)["clusterIP"] {
		t.Errorf("ClusterIP changed: %v → %v", before.spec.(map[string]any)["clusterIP"], during.spec.(map[string]any)["clusterIP"])
	}
	k.eventuallyAnswered(t, "http://web/", "local")
	slices := k.slicesOf(t, "web")
	if len(slices) != 1 || len(slices[ManagedBy]) != 2 {
		t.Errorf("while served, slices by manager: %v; want only plug's (the run's, and the pods' for port 9090)", slices)
	}
	// Checking a name that is as its receipt says writes nothing.
	p.tendAll(bg, false)
	for _, s := range k.slicesOf(t, "web")[ManagedBy] {
		for _, was := range slices[ManagedBy] {
			if s.Metadata.Name == was.Metadata.Name && s.Metadata.ResourceVersion != was.Metadata.ResourceVersion {
				t.Errorf("a check with nothing to do rewrote the slice %s", s.Metadata.Name)
			}
		}
	}

	if err := p.Release(bg, b); err != nil {
		t.Fatal(err)
	}
	k.eventuallyAnswered(t, "http://web/", "deployed")
	after := k.snapshot(t, "web")
	if err := after.sameAs(before); err != nil {
		t.Errorf("after the run: %v", err)
	}
	if s := k.slicesOf(t, "web")[ManagedBy]; len(s) != 0 {
		t.Errorf("after the run, plug's slices are left: %v", s)
	}
	// Giving back twice, or sweeping what is given back, changes nothing.
	if err := p.Release(bg, b); err != nil {
		t.Fatal(err)
	}
	p.sweep(bg, true)
	if again := k.snapshot(t, "web"); again.version != after.version {
		t.Errorf("a second give-back changed the Service: %v", again.sameAs(after))
	}
}

// Safe with several agent replicas: runs on two agents asking for the same
// name at the same moment get it once; the other is told who holds it.
func TestReplicasRacingForOneNameServeItOnce(t *testing.T) {
	k := needKube(t)
	k.deployWeb(t, 1)
	podA, podB := k.agentPod(t, "agent-a"), k.agentPod(t, "agent-b")
	for _, name := range []string{"fresh", "web"} {
		agents := []*Platform{k.platform(t, podA, nil, nil), k.platform(t, podB, nil, nil)}
		errs := make([]error, len(agents))
		var wg sync.WaitGroup
		for i, p := range agents {
			wg.Go(func() { _, errs[i] = p.Serve(bg, k.run(fmt.Sprintf("run-%d", i), name, 80)) })
		}
		wg.Wait()
		var held *tunnel.HeldError
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil:
				winner = i
			case !errors.As(err, &held):
				t.Errorf("%s, agent %d: %v, want success or a HeldError", name, i, err)
			}
		}
		if winner < 0 || held == nil || held.Holder.Run != fmt.Sprintf("run-%d", winner) {
			t.Fatalf("%s: errors %v; want one run to serve it and the other told it holds it", name, errs)
		}
		if err := agents[winner].Release(bg, k.run(fmt.Sprintf("run-%d", winner), name, 80)); err != nil {
			t.Fatal(err)
		}
	}
	k.eventuallyAnswered(t, "http://web/", "deployed")
}

// Acceptance 3: the ports of a multi-port Service the run does not serve
// keep answering from the deployed pods, and follow them as they change.
func TestUnservedPortsKeepAnsweringFromTheDeployedPods(t *testing.T) {
	k := needKube(t)
	k.deployWeb(t, 1)
	p := k.platform(t, "", nil, nil)
	tunneltest.Maintain(t, p)
	b := k.run("run-1", "web", 80)
	if _, err := p.Serve(bg, b); err != nil {
		t.Fatal(err)
	}
	k.eventuallyAnswered(t, "http://web/", "local")
	k.eventuallyAnswered(t, "http://web:9090/", "deployed")

	// The deployed pods change while served: the unserved port follows.
	k.Kubectl(t, "scale", "deployment/web", "--replicas=3")
	k.Kubectl(t, "rollout", "status", "deployment/web", "--timeout=90s")
	clustertest.Eventually(t, 30*time.Second, "the pods' slice lists the 3 ready pods", func() error {
		for _, s := range k.slicesOf(t, "web")[ManagedBy] {
			if s.Metadata.Name == "web-plug-pods" && len(s.Endpoints) == 3 {
				return nil
			}
		}
		return fmt.Errorf("slices %+v", k.slicesOf(t, "web")[ManagedBy])
	})
	k.eventuallyAnswered(t, "http://web:9090/", "deployed")
	k.eventuallyAnswered(t, "http://web/", "local")
	if err := p.Release(bg, b); err != nil {
		t.Fatal(err)
	}
	k.eventuallyAnswered(t, "http://web/", "deployed")
}

// Acceptance 5: a second run asking for a served name is refused with the
// holder's identity, and nothing changes.
func TestSecondRunIsRefusedNamingTheHolder(t *testing.T) {
	k := needKube(t)
	k.deployWeb(t, 1)
	p := k.platform(t, "", nil, nil)
	first := k.run("run-1", "web", 80)
	if _, err := p.Serve(bg, first); err != nil {
		t.Fatal(err)
	}
	held := k.snapshot(t, "web")
	second := k.run("run-2", "web", 80)
	second.Holder.User = "other"
	_, err := p.Serve(bg, second)
	var he *tunnel.HeldError
	if !errors.As(err, &he) || he.Holder.Run != "run-1" || he.Holder.User != "dev" || he.Holder.Developer != "SHA256:test" {
		t.Fatalf("second run: %v, want a HeldError naming run-1 of dev", err)
	}
	if !strings.Contains(err.Error(), "dev (key SHA256:test) since") || strings.Contains(err.Error(), "run-1") {
		t.Errorf("the refusal %q does not say who and since when, or tells the run id", err)
	}
	if after := k.snapshot(t, "web"); after.version != held.version {
		t.Errorf("the refused run changed the Service: %v", after.sameAs(held))
	}
	// Releasing as the refused run gives nothing back.
	if err := p.Release(bg, second); err != nil {
		t.Fatal(err)
	}
	if after := k.snapshot(t, "web"); after.version != held.version {
		t.Errorf("a Release by a run that does not hold the name changed it")
	}
	if err := p.Release(bg, first); err != nil {
		t.Fatal(err)
	}
}

// Acceptance 8: bad names and ports are refused before anything changes;
// ExternalName and headless Services are refused saying why.
func TestBadInputAndUnservableServicesChangeNothing(t *testing.T) {
	k := needKube(t)
	k.Apply(t, `
apiVersion: v1
kind: Service
metadata: {name: alias}
spec: {type: ExternalName, externalName: db.example.org}
---
apiVersion: v1
kind: Service
metadata: {name: headless}
spec:
  clusterIP: None
  selector: {app: web}
  ports: [{name: http, port: 80}]
`)
	p := k.platform(t, "", nil, nil)
	before := k.Kubectl(t, "get", "services,endpointslices", "-o", "custom-columns=NAME:.metadata.name,VERSION:.metadata.resourceVersion")
	cases := []struct {
		b    tunnel.Binding
		want string
	}{
		{k.run("run-1", "Bad_Name", 80), "not a valid cluster name"},
		{k.run("run-1", "web", 0), "out of range"},
		{k.run("run-1", "web", 65536), "out of range"},
		{k.run("run-1", "alias", 80), "ExternalName"},
		{k.run("run-1", "headless", 80), "headless"},
	}
	for _, tc := range cases {
		_, err := p.Serve(bg, tc.b)
		var r *tunnel.RefusedError
		if !errors.As(err, &r) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Serve(%s:%d) = %v, want a refusal saying %q", tc.b.Name, tc.b.Port, err, tc.want)
		}
	}
	after := k.Kubectl(t, "get", "services,endpointslices", "-o", "custom-columns=NAME:.metadata.name,VERSION:.metadata.resourceVersion")
	if after != before {
		t.Errorf("refused requests changed the namespace:\nbefore\n%s\nafter\n%s", before, after)
	}
}
