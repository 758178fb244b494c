package tunnel

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// After a burst (a key that made the agent hold much, then left), the Go
// runtime keeps the memory it freed, and with GOGC=300 it may not even
// collect it for a long while: the agent's resident memory stays near its
// peak. Every scavengeEvery the agent looks at what its heap holds beyond
// the objects the last collection found live; past scavengeOver it
// collects and gives the free memory back to the system at once.
const (
	scavengeEvery = 10 * time.Second
	scavengeOver  = 32 << 20
)

// returnMemory gives freed memory back to the system, as above, until ctx
// ends.
func returnMemory(ctx context.Context) {
	tick := time.NewTicker(scavengeEvery)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
		if reclaimable() > scavengeOver {
			debug.FreeOSMemory()
		}
	}
}

// reclaimable is how many bytes the heap holds from the system beyond its
// objects live at the last collection.
func reclaimable() uint64 {
	s := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/gc/heap/live:bytes"},
	}
	metrics.Read(s)
	var held uint64
	for _, m := range s[:3] {
		if m.Value.Kind() == metrics.KindUint64 {
			held += m.Value.Uint64()
		}
	}
	live := uint64(0)
	if s[3].Value.Kind() == metrics.KindUint64 {
		live = s[3].Value.Uint64()
	}
	return held - min(held, live)
}
