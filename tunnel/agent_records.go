package tunnel

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// The agent keeps a record of each of its runs in the platform's RunStore,
// if it has one (platform.go): plug who reads them all, whichever replica
// it asks, and plug end marks them, whichever replica holds the run.
// Records are written in the background, the latest state of each run
// once, so that no run waits for the cluster.

// recordRetry is how long a record that could not be written waits to be
// tried again.
const recordRetry = 5 * time.Second

// recorder writes the agent's run records.
type recorder struct {
	a     *Agent
	store RunStore // nil: the agent knows its own runs only

	mu     sync.Mutex
	dirty  map[string]*run // runs whose record is to be written (or removed, once ended)
	failed bool            // the last write failed: said once in the log
	kick   chan struct{}
}

func newRecorder(a *Agent) *recorder {
	store, _ := a.Platform.(RunStore)
	return &recorder{a: a, store: store, dirty: map[string]*run{}, kick: make(chan struct{}, 1)}
}

// note asks for r's record to be written as it is now, or removed once r
// has ended.
func (rc *recorder) note(r *run) {
	if rc.store == nil {
		return
	}
	rc.mu.Lock()
	rc.dirty[r.id] = r
	rc.mu.Unlock()
	select {
	case rc.kick <- struct{}{}:
	default:
	}
}

// write writes the records noted until ctx ends, then what is left, once.
func (rc *recorder) write(ctx context.Context) {
	if rc.store == nil {
		return
	}
	for {
		select {
		case <-rc.kick:
			rc.flush(ctx)
		case <-ctx.Done():
			final, cancel := rc.a.platformContext()
			rc.flush(final)
			cancel()
			return
		}
	}
}

// flush writes every noted record; those that fail are noted again for a
// later try.
func (rc *recorder) flush(ctx context.Context) {
	rc.mu.Lock()
	dirty := rc.dirty
	rc.dirty = map[string]*run{}
	rc.mu.Unlock()
	var failed []*run
	for id, r := range dirty {
		rec, ended := r.record()
		rec.Agent = rc.a.ID
		var err error
		if ended {
			err = rc.store.DeleteRun(ctx, rc.a.ID, id)
		} else {
			err = rc.store.PutRun(ctx, rec)
		}
		if err != nil {
			failed = append(failed, r)
		}
		rc.report(err)
	}
	if len(failed) == 0 || ctx.Err() != nil {
		return
	}
	time.AfterFunc(recordRetry, func() {
		for _, r := range failed {
			rc.note(r)
		}
	})
}

// report logs the first failure of a series, and the recovery.
func (rc *recorder) report(err error) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	switch {
	case err != nil && !rc.failed:
		rc.a.logf("cannot write the record of a run in the cluster (%v): plug who on other replicas will not show it, nor plug end there reach it, until this is fixed; retrying", err)
	case err == nil && rc.failed:
		rc.a.logf("the records of runs are written in the cluster again")
	}
	rc.failed = err != nil
}

// watchEnded ends the runs another replica marked ended, until ctx ends:
// the run of the record's id, only if the record's key opened it.
func (rc *recorder) watchEnded(ctx context.Context) {
	if rc.store == nil {
		return
	}
	err := rc.store.WatchEnded(ctx, rc.a.ID, func(rec RunRecord, e RunEnd) {
		if r := rc.a.runOf(rec.Run, rec.Key); r != nil {
			go rc.a.endRun(r, ending{how: EndEnded, by: e.By, reason: e.Reason})
		}
	})
	if ctx.Err() == nil {
		rc.a.logf("not watching the records of runs (%v): plug end on another replica does not reach the runs of this one", err)
	}
}

// runOf is this agent's run id if the key with fingerprint key opened it;
// nil if there is none, or another key opened it.
func (a *Agent) runOf(id, key string) *run {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r := a.runs[id]; r != nil && r.developer == key {
		return r
	}
	return nil
}

// checkRunOwner refuses a hello of dc for run id when the records of the
// replicas say another key opened the run of that id: the key of its
// earliest record (Since), so that a record another key slipped in later
// under that id does not keep the run's own key from moving it here. A
// run id is public (in the audit trail, in the records) and proves
// nothing. Without records (the platform keeps none) there is nothing to
// check.
func (a *Agent) checkRunOwner(dc *devConn, id string) error {
	if a.recorder.store == nil {
		return nil
	}
	ctx, cancel := a.platformContext()
	defer cancel()
	recs, err := a.recorder.store.Runs(ctx)
	if err != nil {
		return fmt.Errorf("the agent cannot read the records of the runs in the cluster to check whom run %s belongs to (%v); try again in a moment", id, err)
	}
	var owner *RunRecord
	for i, rec := range recs {
		if rec.Run == id && (owner == nil || rec.Since.Before(owner.Since)) {
			owner = &recs[i]
		}
	}
	if owner != nil && owner.Key != dc.fingerprint {
		return errOtherKeysRun
	}
	return nil
}

// errOtherKeysRun refuses a hello naming a run another key opened.
var errOtherKeysRun = errors.New("that run id belongs to another key; start a new run (plug gives each run a new id)")

// record is r's record as it is now; ended when r has ended.
func (r *run) record() (rec RunRecord, ended bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return RunRecord{}, true
	}
	rec = RunRecord{
		Run: r.id, User: r.user, Key: r.developer, Comment: r.hello.Comment,
		From: r.from, Version: r.hello.Version, Kind: r.hello.Kind, Container: r.hello.Container, Since: r.since.UTC(),
		Away: r.conn.Load() == nil,
	}
	for _, b := range r.bindings {
		rec.Names = append(rec.Names, RecordName{Name: b.Name, Port: b.Port, UDP: b.UDP, Mode: modeOf(b.served), Since: b.since.UTC(), Filter: b.filter().String()})
	}
	slices.SortFunc(rec.Names, func(x, y RecordName) int { return strings.Compare(x.Name, y.Name) })
	return rec, false
}

// localRecords are the records of this agent's own runs.
func (a *Agent) localRecords() []RunRecord {
	a.mu.Lock()
	runs := slices.Collect(maps.Values(a.runs))
	a.mu.Unlock()
	var out []RunRecord
	for _, r := range runs {
		if rec, ended := r.record(); !ended {
			rec.Agent = a.ID
			out = append(out, rec)
		}
	}
	return out
}

// allRecords are the records of every replica's runs, or this agent's own
// when the platform keeps none. This agent's own are as they are now, not
// as last written.
func (a *Agent) allRecords(ctx context.Context) ([]RunRecord, error) {
	own := a.localRecords()
	if a.recorder.store == nil {
		return own, nil
	}
	stored, err := a.recorder.store.Runs(ctx)
	if err != nil {
		return nil, err
	}
	others := slices.DeleteFunc(stored, func(rec RunRecord) bool { return rec.Agent == a.ID })
	return append(others, own...), nil
}
