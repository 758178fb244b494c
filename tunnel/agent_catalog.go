package tunnel

import (
	"context"
	"time"
)

// namesRetry is how long the agent waits before following the cluster's
// names again after the platform gave up.
const namesRetry = 30 * time.Second

// watchNames keeps the agent's catalog current from the platform until ctx
// ends. When the platform cannot follow the names, runs are told why and
// keep the names they had; the agent tries again after namesRetry.
func (a *Agent) watchNames(ctx context.Context) {
	noter, _ := a.Platform.(NameNoter)
	for {
		err := a.Platform.WatchNames(ctx, func(names []ClusterName) {
			var notes []string
			if noter != nil {
				notes = noter.NameNotes()
			}
			a.names.set(normalize(Catalog{Names: names, Notes: notes}))
		})
		if ctx.Err() != nil {
			return
		}
		a.logf("cannot follow the cluster's names (%v); trying again in %s", err, namesRetry)
		last, _, _ := a.names.get() // the names and notes as last told, normalized, kept by the catalog alone
		a.names.set(Catalog{Names: last.Names, Notes: last.Notes, Unavailable: "the agent cannot follow the cluster's names, they may be out of date: " + err.Error()})
		select {
		case <-ctx.Done():
			return
		case <-time.After(namesRetry):
		}
	}
}

// tellNames sends the agent's catalog to the client now (whenAsked: once
// the client asks for it, its hello said so), and what changed at each
// change, until the connection is gone: only the names that changed when
// the client takes deltas (its hello said so), the whole catalog again
// otherwise; aliases as forms when it takes them (likewise). A client that
// reads slowly gets what changed since the catalog it was last told, all
// at once.
func (dc *devConn) tellNames(h helloMsg) {
	if h.NamesWhenAsked {
		select {
		case <-dc.namesAsked:
		case <-dc.gone:
			return
		}
	}
	var told uint64
	for {
		frames, version, changed := dc.a.names.update(told, h.Deltas, h.Forms)
		for _, f := range frames {
			dc.sendFrame(f)
		}
		told = version
		select {
		case <-changed:
		case <-dc.gone:
			return
		}
	}
}
