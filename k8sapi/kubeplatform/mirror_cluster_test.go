package kubeplatform

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"plug/k8sapi"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// On the real cluster, where the endpoints controller, the EndpointSlice
// controllers and kube-proxy act: from the takeover until the name is
// given back, no slice of the Service lists the parked pods but plug's own
// for ports the run does not serve — in particular none of the mirroring
// controller's, which it made from the legacy Endpoints the moment the
// selector went, before the agent deleted them, and which kube-proxy
// split the traffic with. How soon the agent deletes them depends on the
// machine's load; here its deletion of the Endpoints reaches the API
// server 2 s late, as an agent's on a busy node might: the controller
// mirrors within a second.
func TestATakeoverLeavesNoMomentForAMirroredSlice(t *testing.T) {
	k := needKube(t)
	k.deployWeb(t, 2)
	k.eventuallyAnswered(t, "http://web/", "deployed")
	// What the mirroring controller would copy: the Endpoints the
	// endpoints controller writes for the Service.
	clustertest.Eventually(t, clustertest.Settle, "the endpoints controller to write web's Endpoints", func() error {
		_, err := k8sapi.Resources[k8sapi.Endpoints](k.admin, k8sapi.KindEndpoints, k.Namespace).Get(bg, "web")
		return err
	})
	p := k.platform(t, "", k.slowEndpointsDeletes(t, 2*time.Second), nil)
	tunneltest.Maintain(t, p)
	slices := k.admin.EndpointSlices(k.Namespace)
	opts := k8sapi.ListOptions{LabelSelector: k8sapi.LabelServiceName + "=web"}
	list, err := slices.List(bg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	opts.ResourceVersion = list.Metadata.ResourceVersion
	w, err := slices.Watch(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan []string, 1)
	go func() {
		var writers []string
		defer func() { seen <- writers }()
		for {
			ev, err := w.Next()
			if err != nil {
				return
			}
			if ev.Type == k8sapi.Added {
				writers = append(writers, ev.Object.Metadata.Name+" by "+ev.Object.Metadata.Labels[k8sapi.LabelSliceManagedBy])
			}
		}
	}()

	b := k.run("run-1", "web", 80)
	if _, err := p.Serve(bg, b); err != nil {
		t.Fatal(err)
	}
	k.eventuallyAnswered(t, "http://web/", "local")
	if err := p.Release(bg, b); err != nil {
		t.Fatal(err)
	}
	k.eventuallyAnswered(t, "http://web/", "deployed")
	cancel()
	w.Close()
	made := <-seen
	t.Logf("slices made over the takeover and the give-back: %v", made)
	for _, m := range made {
		if strings.HasSuffix(m, " by endpointslicemirroring-controller.k8s.io") {
			t.Errorf("the mirroring controller made a slice of web, which kube-proxy merges with the run's: %s", m)
		}
	}
}

// slowEndpointsDeletes returns a client of the agent's identity whose
// deletions of Endpoints reach the API server delay late, through a proxy
// on loopback; every other request goes through at once.
func (k *kube) slowEndpointsDeletes(t *testing.T, delay time.Duration) *k8sapi.Client {
	t.Helper()
	server, err := url.Parse(k.agentCfg.Server)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(server)
	proxy.Transport = &http.Transport{TLSClientConfig: k.agentCfg.TLS.Clone(), ForceAttemptHTTP2: true}
	proxy.FlushInterval = -1 // watches stream
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete && strings.Contains(r.URL.Path, "/endpoints/") {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return
			}
		}
		proxy.ServeHTTP(w, r)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	cfg := k.agentCfg
	cfg.Server, cfg.TLS = "http://"+l.Addr().String(), nil
	c, err := k8sapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
