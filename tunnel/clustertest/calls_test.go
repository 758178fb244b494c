package clustertest

import (
	"testing"
	"time"
)

func TestTallyCountsWhatTheCallersSaw(t *testing.T) {
	out := `2026-12-01T10:00:00.1Z new ok deployed conn=1000
2026-12-01T10:00:00.2Z keep ok deployed conn=2000
2026-12-01T10:00:01.1Z new fail dial tcp 10.0.0.1:80: connect: connection refused
2026-12-01T10:00:01.2Z keep ok local conn=2001
2026-12-01T10:00:02.1Z new ok local conn=1001
2026-12-01T10:00:03.1Z new ok late conn=1002
`
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	calls := ParseCalls(out, t0.Add(50*time.Millisecond))
	if len(calls) != 6 {
		t.Fatalf("parsed %d calls, want 6: %+v", len(calls), calls)
	}
	ty := TallyCalls(calls, t0, t0.Add(2500*time.Millisecond))
	if ty.NewOK != 2 || ty.NewFailed != 1 || ty.KeepOK != 2 || ty.KeepFailed != 0 || len(ty.KeepConns) != 2 ||
		ty.Answers["deployed"] != 1 || ty.Answers["local"] != 1 || len(ty.Failures) != 1 {
		t.Errorf("tally %s, failures %v", ty, ty.Failures)
	}
	var sum Tally
	sum.Add(ty)
	sum.Add(ty)
	if sum.NewOK != 4 || sum.Answers["local"] != 2 || len(sum.KeepConns) != 2 {
		t.Errorf("sum %s", sum)
	}
}
