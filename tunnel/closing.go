package tunnel

import (
	"context"
	"fmt"
)

// Closing the tunnel. The operator closes it with a switch: whoever runs
// the agent stops it for good with Stop (a gateway's switch turned off, a
// deployment scaled to zero), or starts it Closed (plug agent's
// PLUG_TUNNEL=closed, which a rollout brings to every replica). Either way
// every run ends, not to reconnect, and its developer reads which switch
// closed the tunnel; what the runs set aside is given back.

// Stop ends every run, telling its developer that by closed the tunnel and
// why (not to reconnect: their plug stops their command), gives back
// every name, and makes Serve return. It is the end of the agent for
// good; a restart, where the runs move to another replica, is the end of
// Serve's context instead.
func (a *Agent) Stop(by, reason string) {
	a.mu.Lock()
	a.final = &ending{how: EndClosed, by: PeerText(by), reason: PeerText(reason)}
	stop := a.stop
	a.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// Refusing says why the agent refuses runs now (the tunnel is closed, or
// it lacks a right runs need), or "" when it serves them.
func (a *Agent) Refusing() string {
	if a.gate == nil {
		return ""
	}
	return a.refusal()
}

// closedText is what a run is told when switch closes the tunnel.
func closedText(by string) string {
	return fmt.Sprintf("the tunnel is closed (%s): the cluster's operator closed it; nothing is served until they open it again", by)
}

// Departing is a Platform that can tell, when the agent is asked to stop,
// whether every agent is going away (the operator scaled the agent to zero
// or removed it) rather than this one being replaced (a rollout, a node
// drained): why, or "" when another agent takes over. plug agent then
// Stops, so that the runs end saying why instead of reconnecting to
// nothing. kubeplatform and swarmplatform implement it.
type Departing interface {
	Platform
	Departing(ctx context.Context) (why string, err error)
}
