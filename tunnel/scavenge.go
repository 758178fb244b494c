package tunnel

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// After a burst (a key that made the agent hold much, then left), the Go
// runtime keeps the memory it freed, and when nothing is allocated any
// more it does not even collect it: the agent's resident memory stays near
// its peak. So every scavengeEvery the agent gives back to the system,
// with a collection first (debug.FreeOSMemory), the heap's memory when
// more than scavengeOver of it is free, or when a key has given back
// something it held (a connection, a channel, a run, a name) since and the
// heap holds more than scavengeOver: what it held may be garbage that no
// collection has found yet. That is one collection every scavengeEvery at
// most, beside the tens a second a busy agent makes anyway.
const (
	scavengeEvery = 10 * time.Second
	scavengeOver  = 16 << 20
)

// returnMemory gives freed memory back to the system, as above, until ctx
// ends; given tells it that a key has given something back.
func returnMemory(ctx context.Context, given <-chan struct{}) {
	tick := time.NewTicker(scavengeEvery)
	defer tick.Stop()
	released := false // something was given back since the last tick
	for {
		select {
		case <-tick.C:
		case <-given:
			released = true
			continue
		case <-ctx.Done():
			return
		}
		held, free := heapMemory()
		if free > scavengeOver || released && held > scavengeOver {
			debug.FreeOSMemory()
		}
		released = false
	}
}

// heapMemory is what the heap holds from the system, and how much of that
// is free (holds no object, dead or alive).
func heapMemory() (held, free uint64) {
	s := []metrics.Sample{
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
	}
	metrics.Read(s)
	for _, m := range s {
		if m.Value.Kind() == metrics.KindUint64 {
			held += m.Value.Uint64()
		}
	}
	if s[0].Value.Kind() == metrics.KindUint64 {
		free = s[0].Value.Uint64()
	}
	return held, free
}
