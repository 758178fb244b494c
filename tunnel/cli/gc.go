package cli

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
)

// gcPercent is the garbage collector's target for a process that carries
// streams. x/crypto/ssh copies every packet it receives into a new buffer
// (32 KiB for a stream), so a tunnel carrying 2 Gbit/s makes some 250 MB/s
// of short-lived garbage over a live heap of a few MB. With Go's default
// (GOGC=100) the collector then runs about a hundred times a second and
// takes a quarter of a transfer's CPU; at 300 it runs a quarter as often
// (measured: +30 % throughput through a served name) while the heap it lets
// grow stays small beside the agent's memory budget (the benchmark reads the
// agent's RSS idle and with 50 runs).
const gcPercent = 300

// streamProcs is how many processors (GOMAXPROCS) the Go code of a
// process that carries streams runs on. x/crypto/ssh hands every packet
// from goroutine to goroutine (the connection's reader, its dispatcher,
// the channel's reader), and while a second processor is idle each
// hand-off wakes a thread to take it: a futex and a context switch per
// packet at each end. On one processor a hand-off is a goroutine switch,
// and the system calls, where the kernel copies the bytes, still run on
// threads of their own beside it. Measured on the bench's Kubernetes (2
// cores; plug -c, 1 GiB each way, the agent's and the CLI's CPU summed):
// 3.9 CPU-s/GiB each way with 2 processors, 2.8 with 1, and 3.7–4.1 Gbit/s
// instead of 2.7–3.3.
const streamProcs = 1

// tuneRuntime tunes the Go runtime for a process that carries streams:
// plug agent calls it as it starts, and a run before it connects. It sets
// gcPercent once, unless the environment sets GOGC; and in plug's own
// process (Main), not in a test's that runs the command, streamProcs,
// unless the environment sets GOMAXPROCS. Both are process-wide, so the
// command sets them, not package tunnel.
func (c *cli) tuneRuntime() {
	setGCPercent()
	if c.ownProcess && os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(streamProcs)
	}
}

var setGCPercent = sync.OnceFunc(func() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
})

// memoryShare is the part of its container's memory limit the agent lets
// the Go runtime use before it collects garbage harder than GOGC says: the
// rest is for what the runtime does not count (the kernel's socket
// buffers, the binary's text).
const memoryShare = 0.9

// limitMemory sets the Go runtime's soft memory limit to memoryShare of
// the container's memory limit (cgroup v2 memory.max, or v1
// memory/memory.limit_in_bytes, under root), unless GOMEMLIMIT is set or
// the container has no limit: so that the garbage GOGC=300 lets pile up
// never takes the agent past its limit. It returns the limit set, 0 for
// none.
func limitMemory(root string) int64 {
	if os.Getenv("GOMEMLIMIT") != "" {
		return 0
	}
	limit := containerMemoryLimit(root)
	if limit <= 0 {
		return 0
	}
	soft := int64(float64(limit) * memoryShare)
	debug.SetMemoryLimit(soft)
	return soft
}

// containerMemoryLimit reads the memory limit of the cgroup mounted at
// root (/sys/fs/cgroup in a container); 0 when there is none.
func containerMemoryLimit(root string) int64 {
	for _, f := range []string{"memory.max", "memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n <= 0 || n >= 1<<50 { // "max", or v1's "unlimited"
			return 0
		}
		return n
	}
	return 0
}
