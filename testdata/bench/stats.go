package main

import (
	"slices"
	"time"
)

// percentile returns the p-th percentile (0 < p ≤ 100) of samples by the
// nearest-rank method; samples is sorted in place.
func percentile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	slices.Sort(samples)
	rank := int(p/100*float64(len(samples))+0.999999) - 1
	rank = max(0, min(rank, len(samples)-1))
	return samples[rank]
}

// median returns the middle value of values (the mean of the middle two
// of an even number; 0 of none); values is sorted in place.
func median(values []float64) float64 {
	if len(values) == 0 {
		return 0
	}
	slices.Sort(values)
	n := len(values)
	if n%2 == 1 {
		return values[n/2]
	}
	return (values[n/2-1] + values[n/2]) / 2
}

// micros is d in microseconds.
func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// mbits is a rate in decimal megabits per second.
func mbits(bytes int64, d time.Duration) float64 {
	return float64(bytes) * 8 / d.Seconds() / 1e6
}
