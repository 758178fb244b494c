package swarmplatform

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"plug/swarmapi"
	"plug/tunnel"
)

// The records of runs (tunnel.RunStore) are swarm configs, one per run per
// agent task holding a connection of it, named plug-run-DIGEST: the record
// itself (JSON tunnel.RunRecord), the agent task holding it and its
// heartbeat are labels, which a config may change (its data may not). plug
// who lists them; plug end marks each config of a run ended (label
// plug.dev/ended), and the agent holding it, following the configs'
// events, ends its part. A record whose task is gone, or whose heartbeat
// is older than Stale, is ignored, and removed by any agent's sweep.
const (
	labelRecordID   = "plug.dev/record-id" // digest of agent and run: one config each
	labelRecordRun  = "plug.dev/run"       // digest of the run
	labelRecordAgnt = "plug.dev/agent"     // digest of the agent
	labelRunRecord  = "plug.dev/run-record"
	labelRunEnded   = "plug.dev/ended"
	labelRunTask    = "plug.dev/task"
)

var _ tunnel.RunStore = (*Platform)(nil)

// runConfigs lists the record configs of this agent's service matching
// more labels (key=value).
func (p *Platform) runConfigs(ctx context.Context, more ...string) ([]swarmapi.Config, error) {
	labels := append([]string{LabelStore + "=run", LabelService + "=" + p.membersService()}, more...)
	cfgs, err := p.opts.Client.Configs(ctx, map[string][]string{"label": labels})
	if err != nil {
		return nil, fmt.Errorf("reading the records of runs (swarm configs plug-run-*): %w", err)
	}
	return cfgs, nil
}

// PutRun writes rec as the config of rec.Run on this agent. When rec says
// the run went away, or came back, the services parked for its names are
// woken, or parked again (away.go).
func (p *Platform) PutRun(ctx context.Context, rec tunnel.RunRecord) error {
	p.noteAway(ctx, rec)
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	id := tunnel.RecordDigest(rec.Agent + "/" + rec.Run)
	for range 8 {
		cfgs, err := p.runConfigs(ctx, labelRecordID+"="+id)
		if err != nil {
			return err
		}
		labels := map[string]string{
			LabelStore: "run", LabelService: p.membersService(), labelRecordID: id,
			labelRecordRun: tunnel.RecordDigest(rec.Run), labelRecordAgnt: tunnel.RecordDigest(rec.Agent),
			labelRunRecord: string(raw), labelRunTask: p.opts.Task, labelHeartbeat: heartbeatNow(),
		}
		if len(cfgs) == 0 {
			_, err = p.opts.Client.CreateConfig(ctx, swarmapi.ConfigSpec{Name: "plug-run-" + id, Labels: labels, Data: []byte("plug run record")})
		} else {
			if ended, ok := cfgs[0].Spec.Labels[labelRunEnded]; ok {
				labels[labelRunEnded] = ended
			}
			err = p.opts.Client.UpdateConfigLabels(ctx, cfgs[0], labels)
		}
		if swarmapi.IsConflict(err) || swarmapi.IsOutOfSequence(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("writing the record of a run (swarm config plug-run-%s): %w", id, err)
		}
		p.records.Add(id)
		return nil
	}
	return fmt.Errorf("the record of a run (swarm config plug-run-%s) kept changing", id)
}

// DeleteRun removes the config of run on agent.
func (p *Platform) DeleteRun(ctx context.Context, agent, run string) error {
	id := tunnel.RecordDigest(agent + "/" + run)
	p.records.Remove(id)
	cfgs, err := p.runConfigs(ctx, labelRecordID+"="+id)
	if err != nil {
		return err
	}
	for _, c := range cfgs {
		if err := p.opts.Client.RemoveConfig(ctx, c.ID); err != nil && !swarmapi.IsNotFound(err) {
			return fmt.Errorf("removing the record of a run (swarm config %s): %w", c.Spec.Name, err)
		}
	}
	return nil
}

// Runs returns the records whose agent task runs and renews them.
func (p *Platform) Runs(ctx context.Context) ([]tunnel.RunRecord, error) {
	cfgs, err := p.runConfigs(ctx)
	if err != nil {
		return nil, err
	}
	var out []tunnel.RunRecord
	for _, c := range cfgs {
		if rec, ok := p.liveRecord(ctx, c); ok {
			out = append(out, rec)
		}
	}
	return out, nil
}

// liveRecord reads the record of c; false when it is unreadable or its
// agent is gone.
func (p *Platform) liveRecord(ctx context.Context, c swarmapi.Config) (tunnel.RunRecord, bool) {
	var rec tunnel.RunRecord
	if err := json.Unmarshal([]byte(c.Spec.Labels[labelRunRecord]), &rec); err != nil || rec.Run == "" {
		return rec, false
	}
	beat, _ := time.Parse(time.RFC3339, c.Spec.Labels[labelHeartbeat])
	alive, _ := p.alive(ctx, c.Spec.Labels[labelRunTask], beat)
	return rec, alive
}

// EndRun marks every live config of run opened by key ended.
func (p *Platform) EndRun(ctx context.Context, run, key string, end tunnel.RunEnd) (int, error) {
	raw, err := json.Marshal(end)
	if err != nil {
		return 0, err
	}
	cfgs, err := p.runConfigs(ctx, labelRecordRun+"="+tunnel.RecordDigest(run))
	if err != nil {
		return 0, err
	}
	live := func(c swarmapi.Config) (tunnel.RunRecord, bool) { return p.liveRecord(ctx, c) }
	return tunnel.MarkEnded(cfgs, run, key, live, func(c swarmapi.Config) error {
		labels := maps.Clone(c.Spec.Labels)
		labels[labelRunEnded] = string(raw)
		if err := p.opts.Client.UpdateConfigLabels(ctx, c, labels); err != nil && !swarmapi.IsNotFound(err) {
			return fmt.Errorf("marking %s ended: %w", c.Spec.Name, err)
		}
		return nil
	})
}

// WatchEnded follows the configs' events and passes on each record of
// agent marked ended, once.
func (p *Platform) WatchEnded(ctx context.Context, agent string, ended func(rec tunnel.RunRecord, end tunnel.RunEnd)) error {
	changed := make(chan struct{}, 1)
	go p.followConfigs(ctx, time.Now(), changed) // from before the first listing: no change is missed
	told := map[string]bool{}
	for {
		cfgs, err := p.runConfigs(ctx, labelRecordAgnt+"="+tunnel.RecordDigest(agent))
		if err == nil {
			for _, c := range cfgs {
				raw, marked := c.Spec.Labels[labelRunEnded]
				if !marked || told[c.ID] {
					continue
				}
				var rec tunnel.RunRecord
				var end tunnel.RunEnd
				if json.Unmarshal([]byte(c.Spec.Labels[labelRunRecord]), &rec) == nil && json.Unmarshal([]byte(raw), &end) == nil {
					told[c.ID] = true
					ended(rec, end)
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-time.After(p.opts.Heartbeat):
		}
	}
}

// followConfigs signals changed at each event of the swarm's configs from
// since on, until ctx ends.
func (p *Platform) followConfigs(ctx context.Context, since time.Time, changed chan<- struct{}) {
	p.followEvents(ctx, since, "config", time.Second, "", func(swarmapi.Event) {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
}

// tendRecords renews the heartbeat of this agent's records every
// Heartbeat, and with every sweep removes the records whose agent is gone.
func (p *Platform) tendRecords(ctx context.Context) {
	p.sweepRecords(ctx)
	tunnel.Duties{Heartbeat: p.opts.Heartbeat, SweepEvery: p.opts.SweepEvery, Beat: p.renewRecords, Sweep: p.sweepRecords}.Run(ctx)
}

func (p *Platform) renewRecords(ctx context.Context) {
	for _, id := range p.records.Names() {
		cfgs, err := p.runConfigs(ctx, labelRecordID+"="+id)
		if err != nil || len(cfgs) == 0 {
			continue
		}
		labels := maps.Clone(cfgs[0].Spec.Labels)
		labels[labelHeartbeat] = heartbeatNow()
		if err := p.opts.Client.UpdateConfigLabels(ctx, cfgs[0], labels); err != nil && !swarmapi.IsOutOfSequence(err) {
			p.opts.Logf("renewing the record of a run (%s): %v", cfgs[0].Spec.Name, err)
		}
	}
}

// sweepRecords removes the records whose agent task is gone or stopped
// renewing them (a restarted agent is a new task).
func (p *Platform) sweepRecords(ctx context.Context) {
	cfgs, err := p.runConfigs(ctx)
	if err != nil {
		return
	}
	for _, c := range cfgs {
		if _, ok := p.liveRecord(ctx, c); ok {
			continue
		}
		if err := p.opts.Client.RemoveConfig(ctx, c.ID); err == nil {
			p.opts.Logf("sweep: removed the record of a run whose agent task %s is gone (%s)", c.Spec.Labels[labelRunTask], c.Spec.Name)
		}
	}
}

func heartbeatNow() string { return time.Now().UTC().Format(time.RFC3339) }
