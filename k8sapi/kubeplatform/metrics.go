package kubeplatform

import (
	"strconv"
	"sync/atomic"

	"plug/tunnel"
)

var _ tunnel.MetricsPlatform = (*Platform)(nil)

// sweepCounts are what the sweep did since the agent started.
type sweepCounts struct {
	givenBack atomic.Uint64 // Services given back for a holder that is gone
	slices    atomic.Uint64 // leftover EndpointSlices of plug deleted
	helpers   atomic.Uint64 // volume helpers removed for a holder that is gone
}

// PlatformMetrics are the API server's failures as the agent saw them, by
// HTTP status, and the sweep's actions; see tunnel.MetricsPlatform.
func (p *Platform) PlatformMetrics() []tunnel.MetricFamily {
	var failures []tunnel.Sample
	for code, n := range p.c.Failures() {
		failures = append(failures, tunnel.Sample{Labels: []tunnel.Label{{Name: "code", Value: strconv.Itoa(code)}}, Value: float64(n)})
	}
	sweep := func(action string, n *atomic.Uint64) tunnel.Sample {
		return tunnel.Sample{Labels: []tunnel.Label{{Name: "action", Value: action}}, Value: float64(n.Load())}
	}
	return []tunnel.MetricFamily{
		{Name: "plug_api_errors_total", Help: "Kubernetes API requests of the agent that failed, by HTTP status (0: no answer).", Type: "counter", Samples: failures},
		{Name: "plug_sweep_actions_total", Help: "What the sweep did: Services given back (give_back), leftover EndpointSlices deleted (delete_slice), volume helpers removed (remove_helper).", Type: "counter", Samples: []tunnel.Sample{
			sweep("give_back", &p.sweeps.givenBack), sweep("delete_slice", &p.sweeps.slices), sweep("remove_helper", &p.sweeps.helpers),
		}},
	}
}
