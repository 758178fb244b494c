package swarmplatform

import (
	"context"

	"plug/swarmapi"
	"plug/tunnel"
)

var _ tunnel.Departing = (*Platform)(nil)

// Departing reports whether the agent's service is going away: removed,
// or scaled to zero replicas. A rolling update keeps its replicas, and a
// task replaced by the swarm keeps its service: another agent takes over.
// An agent that is not a swarm service cannot tell, and says "".
func (p *Platform) Departing(ctx context.Context) (string, error) {
	if p.opts.Service == "" {
		return "", nil
	}
	s, err := p.opts.Client.Service(ctx, p.opts.Service)
	if swarmapi.IsNotFound(err) {
		return "the agent's service was removed by the swarm's operator", nil
	}
	if err != nil {
		return "", err
	}
	if r := s.Spec.Mode.Replicated; r != nil && r.Replicas != nil && *r.Replicas == 0 {
		return "the agent was scaled to zero by the swarm's operator", nil
	}
	return "", nil
}
