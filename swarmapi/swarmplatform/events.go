package swarmplatform

import (
	"context"
	"time"

	"plug/swarmapi"
)

// followEvents calls each for every event of the engine's of type kind
// ("service", "config") from since on, until ctx ends. When the stream
// breaks it logs why and what stands in meanwhile (unless meanwhile is
// empty), waits retry, and follows again from the moment it broke: the
// events the engine kept of the time between come first, so that no change
// is missed.
func (p *Platform) followEvents(ctx context.Context, since time.Time, kind string, retry time.Duration, meanwhile string, each func(swarmapi.Event)) {
	for {
		err := p.opts.Client.Events(ctx, since, map[string][]string{"type": {kind}}, each)
		if ctx.Err() != nil {
			return
		}
		since = time.Now()
		if meanwhile != "" {
			p.opts.Logf("following the engine's %s events: %v; %s meanwhile", kind, err, meanwhile)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
	}
}
