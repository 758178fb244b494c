package kubeplatform

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"plug/k8sapi"
	"plug/tunnel"
)

// What the names watch keeps of a large namespace, once its list is
// garbage: each Service's name and aliases as one string and its ports,
// not the decoded Service (deploy/README.md, "What a key can make the
// agent hold").
func TestWatchNamesKeepsLittleOfEachService(t *testing.T) {
	const services, maxBytes = 10000, 300
	f := newFakeKube(t)
	for i := range services {
		f.create(t, k8sapi.KindService, fmt.Sprintf(`{"metadata": {"name": "svc-%05d", "labels": {"team": "shop"}, "annotations": {"owner": "the shop team"}},
			"spec": {"clusterIP": "10.96.%d.%d", "selector": {"app": "svc-%05d"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}, {"name": "alt", "port": 8080}]}}`, i, i/250, i%250+1, i))
	}
	p := f.platform(t, "", nil)
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	ctx, cancel := context.WithCancel(context.Background())
	listed := make(chan int, 1)
	done := make(chan error, 1)
	go func() {
		done <- p.WatchNames(ctx, func(names []tunnel.ClusterName) { // keeps nothing: what is measured is the platform's own
			select {
			case listed <- len(names):
			default:
			}
		})
	}()
	select {
	case n := <-listed:
		if n != services {
			t.Fatalf("WatchNames published %d names, want %d", n, services)
		}
	case <-time.After(time.Minute):
		t.Fatal("WatchNames published no names within a minute")
	}
	held := int64(heap()) - int64(before)
	t.Logf("the names watch holds %d bytes of heap for %d Services: %d bytes each", held, services, held/services)
	if held > services*maxBytes {
		t.Errorf("the names watch holds %d bytes of heap for %d Services, %d each; want at most %d each", held, services, held/services, maxBytes)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("WatchNames ended with %v, want context.Canceled", err)
	}
}
