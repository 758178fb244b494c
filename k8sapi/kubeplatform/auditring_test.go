package kubeplatform

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"plug/tunnel"
)

// Two agent replicas append to the ring of ConfigMaps at once; each
// write is conditional on the version read, so neither loses the other's
// lines, and a third reads them all.
func TestAuditRingInConfigMapsKeepsEveryReplicasLines(t *testing.T) {
	f := newFakeKube(t)
	var wg sync.WaitGroup
	for _, pod := range []string{"agent-a", "agent-b"} {
		p := f.platform(t, f.agentPod(t, pod), nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := tunnel.NewAuditKeeper(p, t.Logf)
			for i := range 15 {
				k.Add(tunnel.AuditEvent{Time: time.Now().UTC(), Event: tunnel.AuditRunOpened, Agent: pod, Run: fmt.Sprintf("%s-%d", pod, i)})
				k.Flush(bg)
			}
		}()
	}
	wg.Wait()
	reader := f.platform(t, f.agentPod(t, "agent-c"), nil)
	trail, err := tunnel.ReadAuditTrail(bg, reader)
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]bool{}
	for _, e := range trail {
		runs[e.Run] = true
	}
	if len(trail) != 30 || len(runs) != 30 {
		t.Fatalf("the ring holds %d lines of %d runs, want 30 of 30", len(trail), len(runs))
	}
	cm, err := reader.configMaps().Get(bg, AuditConfigMap(0))
	if err != nil || cm.Metadata.Labels["app.kubernetes.io/component"] != "audit" {
		t.Fatalf("%s: %v %+v", AuditConfigMap(0), err, cm)
	}
}
