package swarmplatform

import (
	"fmt"
	"testing"

	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// awayRecord is the record the agent writes of b's run, away or back.
func awayRecord(b tunnel.Binding, away bool) tunnel.RunRecord {
	return tunnel.RunRecord{Run: b.Holder.Run, Key: b.Holder.Developer, User: b.Holder.User, Kind: tunnel.KindServes, Since: b.Holder.Since, Away: away,
		Names: []tunnel.RecordName{{Name: b.Name, Port: b.Port, Mode: tunnel.ModeParked, Since: b.Holder.Since}}}
}

// parkedState waits until service id runs tasks tasks and its receipt
// says awake.
func (f *fakeSwarm) parkedState(t *testing.T, id string, tasks int, awake bool) {
	t.Helper()
	clustertest.Eventually(t, clustertest.Settle, fmt.Sprintf("%d tasks, awake %v", tasks, awake), func() error {
		svc, err := f.c.Service(bg, id)
		if err != nil {
			return err
		}
		r, has, err := receiptOf(svc)
		if n := f.running(t, id); !has || err != nil || r.Awake != awake || n != tasks {
			return fmt.Errorf("%d tasks, receipt %v (%v), awake %v", n, has, err, r.Awake)
		}
		return nil
	})
}

// The unit tests hand the records to noteAway, which PutRun calls: the
// fake engine keeps no configs.

// While the run holding a taken-over name is away, its parked service runs
// again with its receipt on it, and the agent does not take that for a
// revert; back, the service is parked again; given back while away, it is
// restored exactly. Another key's record of the same run id changes
// nothing.
func TestAnAwayRunsParkedServiceRunsMeanwhile(t *testing.T) {
	f := newFakeSwarm(t)
	p := f.agent(t, "plug_agent", nil)
	id, original := f.deploy(t, "web", 2, "www")
	b := run("run-1", "web", 8080)
	tunneltest.Serve(t, p, b)
	f.parkedState(t, id, 0, false)

	other := awayRecord(b, true)
	other.Key = "SHA256:another"
	at := f.Index()
	p.noteAway(bg, other)
	if p.awake("web") {
		t.Error("another key's record woke the service")
	}
	f.unchanged(t, at, "another key's record")

	p.noteAway(bg, awayRecord(b, true))
	f.parkedState(t, id, 2, true)
	if p.unparked(bg, id) {
		t.Error("the woken service counts as unparked by somebody else")
	}
	p.noteAway(bg, awayRecord(b, false))
	f.parkedState(t, id, 0, false)

	p.noteAway(bg, awayRecord(b, true))
	f.parkedState(t, id, 2, true)
	tunneltest.Release(t, p, b)
	f.restored(t, id, original, "given back while awake")
}
