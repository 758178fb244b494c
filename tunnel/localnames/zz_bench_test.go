package localnames

import (
	"fmt"
	"testing"

	"plug/tunnel"
)

func BenchmarkZZPlan(b *testing.B) {
	var names []tunnel.ClusterName
	for i := range 10000 {
		n := fmt.Sprintf("svc-%05d", i)
		names = append(names, tunnel.ClusterName{Name: n, Aliases: []string{n + ".ns", n + ".ns.svc", n + ".ns.svc.cluster.local"}, Ports: []int{80, 8080}})
	}
	b.ReportAllocs()
	for b.Loop() {
		PlanHosts([]Profile{{Name: "p", Names: names}}, []string{"localhost", "h"}, false)
	}
}
