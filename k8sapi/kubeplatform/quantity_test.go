package kubeplatform

import (
	"math"
	"testing"
)

func TestParseQuantity(t *testing.T) {
	for _, tc := range []struct {
		in           string
		milli, units int64
	}{
		{"0", 0, 0},
		{"1", 1000, 1},
		{"500m", 500, 1},
		{"1.5", 1500, 2},
		{"0.1", 100, 1},
		{".5", 500, 1},
		{"5.", 5000, 5},
		{"+2", 2000, 2},
		{"1n", 1, 1},
		{"1u", 1, 1},
		{"1k", 1000000, 1000},
		{"128Mi", 128 << 20 * 1000, 128 << 20},
		{"1Gi", 1 << 30 * 1000, 1 << 30},
		{"1e3", 1000000, 1000},
		{"1E3", 1000000, 1000},
		{"1E", math.MaxInt64, 1e18}, // exa, not an exponent; 10^21 milli-units do not fit
		{"2e-3", 2, 1},
		{"9Ei", math.MaxInt64, math.MaxInt64}, // held to the int64 range
		{"-1.5", -1500, -1},
	} {
		q, err := parseQuantity(tc.in)
		if err != nil {
			t.Errorf("parseQuantity(%q): %v", tc.in, err)
			continue
		}
		if got := q.scaled(-3); got != tc.milli {
			t.Errorf("%q: milli-units %d, want %d", tc.in, got, tc.milli)
		}
		if got := q.scaled(0); got != tc.units {
			t.Errorf("%q: units %d, want %d", tc.in, got, tc.units)
		}
	}
	for _, bad := range []string{"", "m", "1.2.3", "1Kb", "1e", "e3", "1 ", " 1", "1x", "1/2", "--1", "1ee3"} {
		if _, err := parseQuantity(bad); err == nil {
			t.Errorf("parseQuantity(%q) is accepted", bad)
		}
	}
}

func TestInUnits(t *testing.T) {
	for _, tc := range []struct {
		q, divisor string
		cpu        bool
		want       string
	}{
		{"250m", "1", true, "1"},
		{"250m", "1m", true, "250"},
		{"2", "1", true, "2"},
		{"1500m", "1", true, "2"},
		{"128Mi", "1", false, "134217728"},
		{"128Mi", "1Mi", false, "128"},
		{"100M", "1Mi", false, "96"},
		{"1Gi", "1G", false, "2"},
		{"0", "1Mi", false, "0"},
	} {
		q, _ := parseQuantity(tc.q)
		d, _ := parseQuantity(tc.divisor)
		if got := inUnits(q, d, tc.cpu); got != tc.want {
			t.Errorf("%s in units of %s = %s, want %s", tc.q, tc.divisor, got, tc.want)
		}
	}
}
