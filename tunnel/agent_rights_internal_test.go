package tunnel

import (
	"errors"
	"strings"
	"testing"
)

// What the agent logs of its rights: each missing one with its grant, and
// whether it serves runs, which a right taken away from a serving agent
// does not change.
func TestRightsReport(t *testing.T) {
	rights := []Right{
		{Rule: "get services", Feature: "-s", Required: true, Granted: true},
		{Rule: "patch services", Feature: "-s", Required: true, Fix: "kubectl patch"},
		{Rule: "watch pods", Feature: "pods at once"},
	}
	for _, tc := range []struct {
		name    string
		rights  []Right
		err     error
		serving bool
		ready   bool
		want    []string
	}{
		{"all granted", rights[:1], nil, false, true, nil},
		{"an optional one missing", []Right{rights[0], rights[2]}, nil, false, true,
			[]string{"missing right watch pods (for pods at once): that feature is off"}},
		{"a required one missing at boot", rights, nil, false, false,
			[]string{"missing right patch services (for -s), which runs need; grant it with: kubectl patch", "not serving runs: "}},
		{"a required one taken away while serving", rights, nil, true, false,
			[]string{"missing right patch services", "the agent serves runs, but lacks rights they need"}},
		{"cannot check at boot", nil, errors.New("forbidden"), false, false,
			[]string{"not serving runs yet: cannot check the agent's rights in the cluster (forbidden)"}},
	} {
		report, ready := rightsReport(tc.rights, tc.err, tc.serving)
		if ready != tc.ready {
			t.Errorf("%s: ready %t, want %t", tc.name, ready, tc.ready)
		}
		if tc.want == nil && report != "" {
			t.Errorf("%s: reported %q", tc.name, report)
		}
		for _, w := range tc.want {
			if !strings.Contains(report, w) {
				t.Errorf("%s: the report lacks %q:\n%s", tc.name, w, report)
			}
		}
		if tc.serving && strings.Contains(report, "not serving") {
			t.Errorf("%s: a serving agent says it does not serve:\n%s", tc.name, report)
		}
	}
}
