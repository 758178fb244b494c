package tunnel

import (
	"math"
	"testing"
)

// The agent-wide caps are sized so that the SSH connections, the
// connections through the agent and the names they allow together hold
// fewer file descriptors than the process may open: 700 keys asking for 32
// names each (18,960 past the per-key caps' sum) on an agent of 20,000
// files are refused at the cap of names, not by accept failing. In a
// container without those limits the defaults stand.
func TestTheAgentWideCapsFitTheFileDescriptors(t *testing.T) {
	const manifest = 1 << 30 * 9 / 10 // deploy/plug-k8s.yaml's 1 GiB, of which the soft limit
	for _, files := range []uint64{1024, 4096, 20000, 65536, 1 << 20} {
		l := DefaultLimits.sized(files, manifest)
		if used := uint64(l.Conns + l.Channels + l.Names + fdReserve); used > files {
			t.Errorf("%d files: %d SSH connections, %d through the agent and %d names take %d of them", files, l.Conns, l.Channels, l.Names, used)
		}
		t.Logf("%d files, a 1 GiB container: names %d, connections through the agent %d, SSH connections %d, waiting data %d MiB", files, l.Names, l.Channels, l.Conns, l.Memory)
	}
	if l := DefaultLimits.sized(1<<20, manifest); l.Channels*channelCost+l.Names*nameCost+l.Memory<<20 > manifest {
		t.Errorf("in a 1 GiB container, %d connections through the agent, %d names and %d MiB waiting do not fit its %d MiB", l.Channels, l.Names, l.Memory, manifest>>20)
	}
	if l := DefaultLimits.sized(20000, manifest); l.Names >= 700*32 {
		t.Errorf("with 20,000 files the agent lets %d names be served", l.Names)
	}
	if l := DefaultLimits.sized(0, math.MaxInt64); l != DefaultLimits {
		t.Errorf("without limits the caps are %+v, want the defaults %+v", l, DefaultLimits)
	}
	small := DefaultLimits.sized(1<<20, 256<<20) // a 256 MiB container
	if small.Channels*channelCost > 256<<20*2/3 || small.Names*nameCost > 256<<20/8 || small.Memory > 64 || small.MemoryPerKey > small.Memory {
		t.Errorf("a 256 MiB container's caps %+v do not fit it", small)
	}
}
