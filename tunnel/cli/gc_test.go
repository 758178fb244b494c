package cli

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// The container's memory limit is read from cgroup v2 and v1; no limit
// (v2's "max", v1's huge number, no file) is none.
func TestContainerMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		file, content string
		want          int64
	}{
		{"memory.max", "1073741824\n", 1 << 30},
		{"memory.max", "max\n", 0},
		{"memory/memory.limit_in_bytes", "536870912\n", 512 << 20},
		{"memory/memory.limit_in_bytes", "9223372036854771712\n", 0},
		{"", "", 0},
	} {
		root := t.TempDir()
		if tc.file != "" {
			os.MkdirAll(filepath.Dir(filepath.Join(root, tc.file)), 0o755)
			if err := os.WriteFile(filepath.Join(root, tc.file), []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if got := containerMemoryLimit(root); got != tc.want {
			t.Errorf("%s %q: %d, want %d", tc.file, tc.content, got, tc.want)
		}
	}
}

// The agent's GOGC is gcPercent while little is alive, and lowered as the
// live heap grows, so that at most gcHeadroom of garbage piles up, but
// never below gcPercentMin.
func TestHeadroomPercent(t *testing.T) {
	for _, tc := range []struct {
		live uint64
		want int
	}{
		{0, gcPercent},
		{4 << 20, gcPercent},
		{gcHeadroom * 100 / gcPercent, gcPercent},
		{32 << 20, 200},
		{gcHeadroom, 100},
		{1 << 30, gcPercentMin},
	} {
		if got := headroomPercent(tc.live); got != tc.want {
			t.Errorf("live heap %d MiB: GOGC %d, want %d", tc.live>>20, got, tc.want)
		}
	}
}

// capGarbage lowers GOGC after a collection that found a large live heap,
// and raises it again once that is garbage.
func TestCapGarbageFollowsTheLiveHeap(t *testing.T) {
	t.Setenv("GOGC", "")
	defer debug.SetGCPercent(debug.SetGCPercent(gcPercent))
	capGarbage()
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
	await("back to gcPercent with little alive", func(p int) bool { return p == gcPercent })
}
