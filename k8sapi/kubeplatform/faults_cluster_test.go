package kubeplatform

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// isWrite reports whether r changes Service name.
func isWrite(r *http.Request, name string) bool {
	return r.Method == http.MethodPatch && strings.HasSuffix(r.URL.Path, "/services/"+name)
}

// Acceptance 7: a change made to the Service by someone else between
// plug's read and its write (a 409) is retried on the fresh Service, and
// the other writer's change is kept, during the run and after it.
func TestConcurrentChangeDuringTakeoverIsRetried(t *testing.T) {
	k := needKube(t)
	k.deployWeb(t, 1)
	proxy, client := k.newAPIProxy(t)
	p := k.platform(t, "", client, nil)
	var writes atomic.Int32
	proxy.hooks(func(r *http.Request) {
		if isWrite(r, "web") && writes.Add(1) == 1 {
			// Another writer changes the Service just before plug's first write.
			k.Kubectl(t, "annotate", "service/web", "reviewed-by=ops")
		}
	}, nil)
	b := k.run("run-1", "web", 80)
	if _, err := p.Serve(bg, b); err != nil {
		t.Fatal(err)
	}
	if writes.Load() < 2 {
		t.Errorf("plug wrote %d times; the first write must have met a conflict and been retried", writes.Load())
	}
	k.eventuallyAnswered(t, "http://web/", "local")
	if got := k.snapshot(t, "web").annotations.(map[string]any)["reviewed-by"]; got != "ops" {
		t.Errorf("the other writer's annotation is %v while served", got)
	}
	if err := p.Release(bg, b); err != nil {
		t.Fatal(err)
	}
	after := k.snapshot(t, "web")
	if after.annotations.(map[string]any)["reviewed-by"] != "ops" || after.spec.(map[string]any)["selector"] == nil {
		t.Errorf("after the run: annotations %v, selector %v", after.annotations, after.spec.(map[string]any)["selector"])
	}
	k.eventuallyAnswered(t, "http://web/", "deployed")
}

// Acceptance 7: the API server unreachable for 15 s in the middle of a run
// loses nothing: traffic keeps reaching the run, a Serve in the outage
// fails having changed nothing, and a Release in the outage completes once
// the server is back.
func TestAPIServerOutageMidRunLosesNothing(t *testing.T) {
	k := needKube(t)
	k.deployWeb(t, 1)
	k.Apply(t, `
apiVersion: v1
kind: Service
metadata: {name: other}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
`)
	proxy, client := k.newAPIProxy(t)
	p := k.platform(t, "", client, func(o *Options) { o.Heartbeat = time.Second })
	tunneltest.Maintain(t, p)
	b := k.run("run-1", "web", 80)
	before := k.snapshot(t, "web")
	if _, err := p.Serve(bg, b); err != nil {
		t.Fatal(err)
	}
	k.eventuallyAnswered(t, "http://web/", "local")

	proxy.setDown(true)
	downAt := time.Now()
	otherBefore := k.snapshot(t, "other")
	ctx, cancel := context.WithTimeout(bg, 3*time.Second)
	_, err := p.Serve(ctx, k.run("run-1", "other", 80))
	cancel()
	if err == nil {
		t.Fatal("Serve succeeded with the API server unreachable")
	}
	if err := k.snapshot(t, "other").sameAs(otherBefore); err != nil {
		t.Errorf("a Serve that failed in the outage changed the Service: %v", err)
	}
	k.eventuallyAnswered(t, "http://web/", "local") // the run goes on meanwhile

	// The run ends during the outage; the server comes back 15 s after it left.
	time.AfterFunc(15*time.Second-time.Since(downAt), func() { proxy.setDown(false) })
	ctx, cancel = context.WithTimeout(bg, 40*time.Second)
	defer cancel()
	if err := p.Release(ctx, b); err != nil {
		t.Fatalf("Release across the outage: %v", err)
	}
	if time.Since(downAt) < 15*time.Second {
		t.Fatalf("Release returned after %v, while the API server was still unreachable", time.Since(downAt))
	}
	k.eventuallyAnswered(t, "http://web/", "deployed")
	if err := k.snapshot(t, "web").sameAs(before); err != nil {
		t.Errorf("after the run: %v", err)
	}
}

// Acceptance 7: the API server lost right after the takeover's one write
// leaves the name working (the deployed pods still answer it) with its
// receipt, and the sweep gives it back once the server is reachable again.
func TestOutageRightAfterTakeoverIsSweptBack(t *testing.T) {
	k := needKube(t)
	k.deployWeb(t, 1)
	before := k.snapshot(t, "web")
	proxy, client := k.newAPIProxy(t)
	p := k.platform(t, "", client, func(o *Options) { o.Stale = 3 * time.Second })
	proxy.hooks(nil, func(r *http.Request, status int) bool { return isWrite(r, "web") && status == http.StatusOK })
	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	_, err := p.Serve(ctx, k.run("run-1", "web", 80))
	if err == nil {
		t.Fatal("Serve succeeded though the API server went away after its first write")
	}
	t.Logf("Serve: %v", err)
	svc, err := k.admin.Services(k.Namespace).Get(bg, "web")
	if err != nil {
		t.Fatal(err)
	}
	if svc.Metadata.Annotations[AnnotationReceipt] == "" {
		t.Fatalf("the half-done takeover left no receipt: %+v", svc.Metadata)
	}
	k.eventuallyAnswered(t, "http://web/", "deployed") // never a name selecting nobody

	proxy.setDown(false)
	proxy.hooks(nil, nil)
	clustertest.Eventually(t, clustertest.Settle, "the sweep gives web back", func() error {
		p.sweep(bg, false)
		return k.snapshot(t, "web").sameAs(before)
	})
	if s := k.slicesOf(t, "web")[ManagedBy]; len(s) != 0 {
		t.Errorf("plug's slices are left: %v", s)
	}
	k.eventuallyAnswered(t, "http://web/", "deployed")
}
