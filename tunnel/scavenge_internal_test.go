package tunnel

import (
	"runtime"
	"runtime/debug"
	"testing"
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
