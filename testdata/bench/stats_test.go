package main

import (
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{5}, 5},
		{[]float64{900, 100, 500}, 500},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestPercentile(t *testing.T) {
	samples := []time.Duration{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for p, want := range map[float64]time.Duration{50: 5, 99: 10, 10: 1} {
		if got := percentile(samples, p); got != want {
			t.Errorf("percentile %v = %v, want %v", p, got, want)
		}
	}
}
