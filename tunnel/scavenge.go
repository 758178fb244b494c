package tunnel

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"time"
)

// After a burst (a key that made the agent hold much, then left; the
// cluster's names listed; many runs told them), the Go runtime keeps the
// memory it freed, and when nothing is allocated any more it does not even
// collect it: the agent's resident memory stays near its peak, and with
// the agent's GOGC of 300 that peak may be four times what is alive. So
// the agent gives back to the system, with a collection first
// (debug.FreeOSMemory), what its heap holds beyond the objects the last
// collection found alive and the gaps between them, when that is more
// than scavengeOver (free memory, and garbage no collection has found
// yet), or when a key has given back something it held (a connection, a
// channel, a run, a name) and the heap holds more than scavengeOver: what
// it held became garbage after the last collection. It looks every
// scavengeLook, and gives back once the burst is over (it allocated less
// than quietAlloc since it last looked), or else every scavengeEvery at
// most: one collection every scavengeEvery for an agent that stays busy,
// beside the tens a second a busy agent makes anyway, and an agent that
// goes quiet is back near its live heap within scavengeLook of the end of
// a burst (a sweep of a namespace of 10,000 Services, a burst of runs).
const (
	scavengeLook  = time.Second
	scavengeEvery = 10 * time.Second
	scavengeOver  = 1 << 20
	quietAlloc    = 1 << 20
)

// returnMemory gives freed memory back to the system, as above, until ctx
// ends; given tells it that a key has given something back.
func returnMemory(ctx context.Context, given <-chan struct{}) {
	tick := time.NewTicker(scavengeLook)
	defer tick.Stop()
	released := false // something was given back since the memory was last given back
	allocated := allocatedBytes()
	last := time.Now() // when the memory was last given back
	for {
		select {
		case <-tick.C:
		case <-given:
			released = true
			continue
		case <-ctx.Done():
			return
		}
		before := allocated
		allocated = allocatedBytes()
		if allocated-before >= quietAlloc && time.Since(last) < scavengeEvery {
			continue // still busy: given back at most every scavengeEvery
		}
		held, spare := heapMemory()
		if spare > scavengeOver || released && held > scavengeOver {
			debug.FreeOSMemory()
			released, last = false, time.Now()
			allocated = allocatedBytes()
		}
	}
}

// allocatedBytes is how much the process has allocated on its heap since
// it started.
func allocatedBytes() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// heapMemory is what the heap holds from the system, and how much of that
// a collection would give back: free memory, and objects that have died
// since the last collection found the live ones or were not collected
// yet; not the gaps between live objects, which no collection returns.
func heapMemory() (held, spare uint64) {
	s := []metrics.Sample{
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/gc/heap/live:bytes"},
	}
	metrics.Read(s)
	var v [4]uint64
	for i, m := range s {
		if m.Value.Kind() == metrics.KindUint64 {
			v[i] = m.Value.Uint64()
		}
	}
	held = v[0] + v[1] + v[2]
	if free, objects, live := v[0], v[1], v[3]; live < free+objects {
		spare = free + objects - live
	}
	return held, spare
}

// gcHeadroom is the most garbage an agent lets pile up between two
// collections once its live heap is large, and gcPercentMin the lowest
// GOGC it sets for that. plug agent's GOGC of 300 lets the heap grow to
// four times what is alive: cheap while a few MB are (an agent carrying
// streams), but an agent holding the names of 10,000 Services and 200
// runs (some 30 MB) would grow to 120 MB before it collects.
const (
	gcHeadroom   = 64 << 20
	gcPercentMin = 100
)

// headroomPercent is the GOGC that lets gcHeadroom of garbage pile up over
// a live heap of live bytes, within gcPercentMin and highest.
func headroomPercent(live uint64, highest int) int {
	if live == 0 {
		return highest
	}
	return int(max(gcPercentMin, min(uint64(highest), gcHeadroom*100/live)))
}

// CapGarbage keeps GOGC, after each collection, at headroomPercent of the
// live heap the collection found, highest being the GOGC the process runs
// with, until stop is called: plug agent calls it as it starts, unless the
// environment sets GOGC.
func CapGarbage(highest int) (stop func()) {
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	set := highest
	var stopped atomic.Bool
	var collected func(*gcCycle)
	collected = func(c *gcCycle) {
		if stopped.Load() {
			return
		}
		metrics.Read(live)
		if live[0].Value.Kind() == metrics.KindUint64 {
			if pct := headroomPercent(live[0].Value.Uint64(), highest); pct != set {
				debug.SetGCPercent(pct)
				set = pct
			}
		}
		runtime.SetFinalizer(c, collected) // again after the next collection
	}
	runtime.SetFinalizer(&gcCycle{}, collected)
	return func() { stopped.Store(true) }
}

// gcCycle is an object nothing refers to, whose finalizer runs after each
// collection. It holds a pointer so that it is allocated alone, not with
// other small objects, which may keep it alive.
type gcCycle struct{ _ *byte }
