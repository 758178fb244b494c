package tunnel

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// TestHeapMemoryCountsGarbageAsSpare: garbage that no collection has found
// yet (what an agent leaves behind when it goes quiet after a burst) is
// counted as spare, so that returnMemory collects it and gives it back.
func TestHeapMemoryCountsGarbageAsSpare(t *testing.T) {
	runtime.GC()
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // no collection finds the garbage below
	const burst = 64 << 20
	var sink [][]byte
	for range burst / 4096 {
		sink = append(sink, make([]byte, 4096))
	}
	runtime.KeepAlive(sink)
	sink = nil
	held, spare := heapMemory()
	if held < burst || spare < burst {
		t.Fatalf("after %d MiB of garbage: the heap holds %d MiB, %d MiB of it spare; want both at least %d MiB", burst>>20, held>>20, spare>>20, burst>>20)
	}
	t.Logf("the heap holds %d MiB, %d MiB of it spare", held>>20, spare>>20)
}

// An agent's GOGC is the highest while little is alive, and lowered as the
// live heap grows, so that at most gcHeadroom of garbage piles up, but
// never below gcPercentMin.
func TestHeadroomPercent(t *testing.T) {
	for _, tc := range []struct {
		live uint64
		want int
	}{
		{0, 300},
		{4 << 20, 300},
		{gcHeadroom / 3, 300},
		{32 << 20, 200},
		{gcHeadroom, 100},
		{1 << 30, gcPercentMin},
	} {
		if got := headroomPercent(tc.live, 300); got != tc.want {
			t.Errorf("live heap %d MiB: GOGC %d, want %d", tc.live>>20, got, tc.want)
		}
	}
}

// CapGarbage lowers GOGC after a collection that found a large live heap,
// and raises it again once that is garbage.
func TestCapGarbageFollowsTheLiveHeap(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(300))
	defer CapGarbage(300)()
	gogc := func() int { p := debug.SetGCPercent(-1); debug.SetGCPercent(p); return p }
	await := func(what string, want func(int) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !want(gogc()) {
			if time.Now().After(deadline) {
				t.Fatalf("GOGC is %d; want it %s", gogc(), what)
			}
			runtime.GC()
		}
	}
	held := make([][]byte, 0, 2*gcHeadroom>>16)
	for range cap(held) {
		held = append(held, make([]byte, 1<<16))
	}
	await("at most 100 with twice gcHeadroom alive", func(p int) bool { return p <= 100 })
	runtime.KeepAlive(held)
	held = nil
	await("back to 300 with little alive", func(p int) bool { return p == 300 })
}
