package cli

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
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

// plug's own process carries streams on streamProcs processors unless
// GOMAXPROCS says otherwise; a test's process that runs the command keeps
// its own.
func TestAStreamCarryingProcessRunsOnOneProcessor(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	t.Setenv("GOMAXPROCS", "")
	for _, tc := range []struct {
		what  string
		own   bool
		env   string
		procs int
	}{
		{"a test's process", false, "", 2},
		{"plug's own process", true, "", streamProcs},
		{"plug's own process, GOMAXPROCS=2", true, "2", 2},
	} {
		runtime.GOMAXPROCS(2)
		os.Setenv("GOMAXPROCS", tc.env)
		(&cli{ownProcess: tc.own}).tuneRuntime()
		if got := runtime.GOMAXPROCS(0); got != tc.procs {
			t.Errorf("%s: GOMAXPROCS %d, want %d", tc.what, got, tc.procs)
		}
	}
}
