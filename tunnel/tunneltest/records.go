package tunneltest

import (
	"context"
	"sync"

	"plug/tunnel"
)

// runRecords are the run records (tunnel.RunStore) of the agents sharing one
// Platform, as the replicas of one cluster share them.
type runRecords struct {
	recordsMu      sync.Mutex
	records        map[string]*memoryRecord // by "agent/run"
	recordsChanged chan struct{}            // closed and replaced when a record is marked ended
}

var _ tunnel.RunStore = (*Platform)(nil)

// memoryRecord is a run record kept by a Platform.
type memoryRecord struct {
	rec   tunnel.RunRecord
	ended *tunnel.RunEnd
}

// PutRun keeps rec; see tunnel.RunStore. Agents sharing one Platform see
// each other's records, as replicas in one cluster do.
func (p *Platform) PutRun(ctx context.Context, rec tunnel.RunRecord) error {
	p.recordsMu.Lock()
	defer p.recordsMu.Unlock()
	p.init()
	key := rec.Agent + "/" + rec.Run
	old := p.records[key]
	p.records[key] = &memoryRecord{rec: rec}
	if old != nil {
		p.records[key].ended = old.ended
	}
	return nil
}

// DeleteRun forgets agent's record of run.
func (p *Platform) DeleteRun(ctx context.Context, agent, run string) error {
	p.recordsMu.Lock()
	defer p.recordsMu.Unlock()
	delete(p.records, agent+"/"+run)
	return nil
}

// Runs returns every record kept, of every agent.
func (p *Platform) Runs(ctx context.Context) ([]tunnel.RunRecord, error) {
	p.recordsMu.Lock()
	defer p.recordsMu.Unlock()
	out := make([]tunnel.RunRecord, 0, len(p.records))
	for _, r := range p.records {
		out = append(out, r.rec)
	}
	return out, nil
}

// EndRun marks every record of run opened by key ended, and tells the
// agents watching.
func (p *Platform) EndRun(ctx context.Context, run, key string, end tunnel.RunEnd) (int, error) {
	p.recordsMu.Lock()
	defer p.recordsMu.Unlock()
	p.init()
	n := 0
	for _, r := range p.records {
		if r.rec.Run == run && r.rec.Key == key {
			r.ended = &end
			n++
		}
	}
	if n > 0 {
		close(p.recordsChanged)
		p.recordsChanged = make(chan struct{})
	}
	return n, nil
}

// WatchEnded calls ended for each record of agent marked ended, once.
func (p *Platform) WatchEnded(ctx context.Context, agent string, ended func(rec tunnel.RunRecord, end tunnel.RunEnd)) error {
	told := map[*memoryRecord]bool{}
	for {
		p.recordsMu.Lock()
		p.init()
		var due []*memoryRecord
		for _, r := range p.records {
			if r.rec.Agent == agent && r.ended != nil && !told[r] {
				due = append(due, r)
				told[r] = true
			}
		}
		changed := p.recordsChanged
		p.recordsMu.Unlock()
		for _, r := range due {
			ended(r.rec, *r.ended)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// init makes the maps on first use; recordsMu is held.
func (p *runRecords) init() {
	if p.records == nil {
		p.records = map[string]*memoryRecord{}
		p.recordsChanged = make(chan struct{})
	}
}
