package lifeline

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxRounds bounds the rounds of endDescendants: each round kills every
// descendant found, and a round finds those that a killed process started
// while it was being killed.
const maxRounds = 100

// self is the path the guardian is started from: plug's own executable,
// even if the file was replaced since (plug update).
func self() (string, error) { return "/proc/self/exe", nil }

// childAttr makes the command receive SIGKILL if the guardian dies.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// becomeReaper makes the guardian adopt every orphaned descendant, so
// that none escapes endDescendants.
func becomeReaper() {
	unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// endDescendants kills, with SIGKILL, every process descended from the
// guardian, and collects them. Orphans come back to the guardian as its
// children (it is their subreaper), so a round ends once no child is left.
func endDescendants() {
	me := os.Getpid()
	for range maxRounds {
		children := childrenOf()
		tree := descendants(children, me)
		if len(tree) == 0 {
			return
		}
		for _, pid := range tree {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		for _, pid := range children[me] {
			var ws syscall.WaitStatus
			syscall.Wait4(pid, &ws, 0, nil)
		}
		reap(0)
	}
}

// childrenOf maps each process of the machine's process table to its
// children.
func childrenOf() map[int][]int {
	out := map[int][]int{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // it ended meanwhile
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		end := bytes.LastIndexByte(b, ')')
		if end < 0 {
			continue
		}
		fields := bytes.Fields(b[end+1:])
		if len(fields) < 2 {
			continue
		}
		pid, err1 := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		ppid, err2 := strconv.Atoi(string(fields[1]))
		if err1 == nil && err2 == nil {
			out[ppid] = append(out[ppid], pid)
		}
	}
	return out
}
