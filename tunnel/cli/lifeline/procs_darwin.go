package lifeline

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxRounds bounds the looks of endDescendants for processes forked while
// it stops the others.
const maxRounds = 100

// self is the path the guardian is started from: plug's own executable.
func self() (string, error) { return os.Executable() }

// childAttr is nil: macOS has no parent-death signal.
func childAttr() *syscall.SysProcAttr { return nil }

// becomeReaper does nothing: macOS has no subreaper.
func becomeReaper() {}

// endDescendants kills, with SIGKILL, every process descended from the
// guardian. Each is stopped first (SIGSTOP), so that none forks or exits
// (handing its children to launchd) while the tree is walked; the walk is
// repeated until it finds no process it has not stopped.
func endDescendants() {
	stopped := map[int]bool{}
	for range maxRounds {
		found := false
		for _, pid := range descendants(childrenOf(), os.Getpid()) {
			if !stopped[pid] {
				syscall.Kill(pid, syscall.SIGSTOP)
				stopped[pid] = true
				found = true
			}
		}
		if !found {
			break
		}
	}
	for pid := range stopped {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// childrenOf maps each process of the machine's process table to its
// children.
func childrenOf() map[int][]int {
	procs, err := unix.SysctlKinfoProcSlice("kern.proc.all")
	if err != nil {
		return nil
	}
	kids := map[int][]int{}
	for _, p := range procs {
		if p.Proc.P_pid > 0 {
			kids[int(p.Eproc.Ppid)] = append(kids[int(p.Eproc.Ppid)], int(p.Proc.P_pid))
		}
	}
	return kids
}
