package tunnel

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// After a burst (a key that made the agent hold much, then left; the
// cluster's names listed; many runs told them), the Go runtime keeps the
// memory it freed, and when nothing is allocated any more it does not even
// collect it: the agent's resident memory stays near its peak, and with
// the agent's GOGC of 300 that peak may be four times what is alive. So
// every scavengeEvery the agent gives back to the system, with a
// collection first (debug.FreeOSMemory), what its heap holds beyond the
// objects the last collection found alive, when that is more than
// scavengeOver (free memory, and garbage no collection has found yet), or
// when a key has given back something it held (a connection, a channel, a
// run, a name) since and the heap holds more than scavengeOver: what it
// held became garbage after the last collection. That is one collection
// every scavengeEvery at most, beside the tens a second a busy agent
// makes anyway.
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
		held, spare := heapMemory()
		if spare > scavengeOver || released && held > scavengeOver {
			debug.FreeOSMemory()
		}
		released = false
	}
}

// heapMemory is what the heap holds from the system, and how much of that
// the last collection did not find alive: free memory, and objects that
// have died since or were not collected yet.
func heapMemory() (held, spare uint64) {
	s := []metrics.Sample{
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/gc/heap/live:bytes"},
	}
	metrics.Read(s)
	for _, m := range s[:3] {
		if m.Value.Kind() == metrics.KindUint64 {
			held += m.Value.Uint64()
		}
	}
	if live := s[3].Value; live.Kind() == metrics.KindUint64 && live.Uint64() < held {
		spare = held - live.Uint64()
	}
	return held, spare
}
