package tunnel

import (
	"sync"
	"time"
)

// rateBuckets is a token bucket per key (a peer, a source address): each
// holds burst tokens, refilled at perSecond; taking one from an empty
// bucket fails and is counted. It keeps at most max buckets: past that,
// buckets that have refilled are forgotten (they would start full again),
// and keys still new to it share one bucket. The zero value is not ready:
// use newRateBuckets.
type rateBuckets struct {
	burst, perSecond float64
	max              int

	mu    sync.Mutex
	keys  map[string]*tokenBucket
	other tokenBucket // for keys beyond max
}

type tokenBucket struct {
	tokens  float64
	last    time.Time
	dropped int // takes refused since the last one granted
}

func newRateBuckets(burst, perSecond float64, max int) *rateBuckets {
	return &rateBuckets{burst: burst, perSecond: perSecond, max: max, keys: map[string]*tokenBucket{}, other: tokenBucket{tokens: burst}}
}

// take takes a token of key's bucket. It reports whether there was one,
// and when there was, how many takes were refused since the last granted.
func (r *rateBuckets) take(key string) (ok bool, dropped int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.bucket(key)
	now := time.Now()
	if !b.last.IsZero() {
		b.tokens = min(r.burst, b.tokens+now.Sub(b.last).Seconds()*r.perSecond)
	}
	b.last = now
	if b.tokens < 1 {
		b.dropped++
		return false, 0
	}
	b.tokens--
	dropped, b.dropped = b.dropped, 0
	return true, dropped
}

// bucket is key's bucket, made full for a new key. Called with r.mu held.
func (r *rateBuckets) bucket(key string) *tokenBucket {
	if b := r.keys[key]; b != nil {
		return b
	}
	if len(r.keys) >= r.max {
		now := time.Now()
		for k, b := range r.keys {
			if b.dropped == 0 && b.tokens+now.Sub(b.last).Seconds()*r.perSecond >= r.burst {
				delete(r.keys, k)
			}
		}
	}
	if len(r.keys) >= r.max {
		return &r.other
	}
	b := &tokenBucket{tokens: r.burst}
	r.keys[key] = b
	return b
}
