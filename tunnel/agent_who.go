package tunnel

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// busyText answers a question asked while another is being answered.
const busyText = "one question at a time: the agent is still answering the last one"

// answer runs f, the answer to a question on the control channel, in the
// background; one question at a time per connection, so that a peer
// cannot make the agent ask the cluster more than that. A question asked
// meanwhile is answered with busy, or not at all when busy is nil.
func (dc *devConn) answer(busy message, f func()) {
	if !dc.busy.CompareAndSwap(false, true) {
		if busy != nil {
			dc.sendControl(busy)
		}
		return
	}
	go func() {
		defer dc.busy.Store(false)
		f()
	}()
}

// answerWho answers plug who: every replica's runs, or only those of the
// caller's key unless Keys says it oversees them.
func (dc *devConn) answerWho() {
	recs, all, err := dc.visibleRecords()
	if err != nil {
		dc.sendControl(whoMsg{Error: err.Error()})
		return
	}
	runs := mergeRuns(recs)
	runs = runs[:min(len(runs), maxWhoRuns)]
	if dc.a.usersAsserted() {
		for i := range runs {
			runs[i].UserAsserted = true
		}
	}
	sendParts(runs, func(part []Plugged, more bool) {
		dc.sendControl(whoMsg{Runs: part, All: all, More: more})
	})
}

// sendParts sends items in as many parts as a control message's size
// needs (at least one, maybe empty): more is set on every part but the
// last.
func sendParts[T any](items []T, send func(part []T, more bool)) {
	for {
		n, size := 0, 0
		for n < len(items) && (n == 0 || size+jsonSize(items[n]) <= partBudget) {
			size += jsonSize(items[n])
			n++
		}
		more := n < len(items)
		send(items[:n], more)
		if !more {
			return
		}
		items = items[n:]
	}
}

// visibleRecords reads the records of every run in the cluster (within
// the platform's timeout) and keeps those dc may see: every run when its
// key oversees the others (all), else its own.
func (dc *devConn) visibleRecords() (recs []RunRecord, all bool, err error) {
	ctx, cancel := dc.a.platformContext()
	defer cancel()
	recs, err = dc.a.allRecords(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("the agent cannot read the records of the runs in the cluster: %w", err)
	}
	all = dc.a.oversees(dc)
	if !all {
		recs = slices.DeleteFunc(recs, func(rec RunRecord) bool { return rec.Key != dc.fingerprint })
	}
	return recs, all, nil
}

// partBudget is how much of a control message the items of one part of
// an answer may fill; the rest is room for the message's other fields.
const partBudget = maxControlFrame - 8<<10

// jsonSize is how many bytes v takes in a control message.
func jsonSize(v any) int {
	b, _ := json.Marshal(v)
	return len(b) + 1
}

// answerEnd answers plug end: the run m names is ended on this agent at
// once, and marked ended in the records of every other replica holding a
// connection of it, which end their part. A run is its id and the key that
// opened it: only that key's records and runs of the id are ended. A
// developer who does not oversee the others' runs ends their own only.
func (dc *devConn) answerEnd(m endMsg) {
	a := dc.a
	if err := checkEndArgs(m.Run, m.Reason); err != nil {
		dc.sendControl(endMsg{Error: err.Error()})
		return
	}
	recs, all, err := dc.visibleRecords()
	if err != nil {
		dc.sendControl(endMsg{Error: err.Error()})
		return
	}
	// A run is its id and the key that opened it: records of one id
	// written for two keys are two runs, and only the key's own is ended.
	var runs []RunRecord
	for _, rec := range recs {
		if strings.HasPrefix(rec.Run, m.Run) && !slices.ContainsFunc(runs, func(o RunRecord) bool { return o.Run == rec.Run && o.Key == rec.Key }) {
			runs = append(runs, rec)
		}
	}
	switch {
	case len(runs) == 0 && all:
		dc.sendControl(endMsg{Error: fmt.Sprintf("no run %s is plugged in; plug who lists the runs", m.Run)})
		return
	case len(runs) == 0:
		dc.sendControl(endMsg{Error: fmt.Sprintf("no run %s of your key is plugged in; plug who lists yours (ending another developer's run takes a member of the cluster, or an admin)", m.Run)})
		return
	case len(runs) > 1:
		names := make([]string, len(runs))
		for i, rec := range runs {
			names[i] = rec.Run + " of " + rec.Key
		}
		dc.sendControl(endMsg{Error: fmt.Sprintf("%s is the beginning of several runs (%s): give more of its id (of runs of one id opened by two keys, plug members remove ends the one that should not be there)", m.Run, strings.Join(names, ", "))})
		return
	}
	whose := runs[0]
	id := whose.Run
	end := RunEnd{By: fmt.Sprintf("%s (%s)", dc.user, dc.fingerprint), Reason: m.Reason, At: time.Now().UTC()}
	if r := a.runOf(id, whose.Key); r != nil {
		go a.endRun(r, ending{how: EndEnded, by: end.By, reason: end.Reason})
	}
	if a.recorder.store != nil {
		ctx, cancel := a.platformContext()
		defer cancel()
		if _, err := a.recorder.store.EndRun(ctx, id, whose.Key, end); err != nil {
			dc.sendControl(endMsg{Error: fmt.Sprintf("run %s could not be marked ended in the cluster (%v): the replicas holding it were not told; try again", id, err)})
			return
		}
	}
	dc.sendControl(endMsg{Ended: id, User: whose.User, Key: whose.Key})
}
