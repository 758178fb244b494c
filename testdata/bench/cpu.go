package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// treeCPU is the CPU time (user + system) that the processes of the trees
// rooted at roots have spent so far, leaving out every process that runs
// the file skip (the bench tool, which is the load a tunnel carries, not
// the tunnel) and its descendants. The bench runs on the node, in the
// machine's one PID namespace, so the agent's process and the sshd's
// per-connection children are readable here as well as the laptop's.
//
// Each thread's time is read from /proc/PID/task/TID/schedstat, in
// nanoseconds: the same time /proc/PID/stat counts as utime + stime in
// 10 ms ticks, too coarse for a transfer of a fraction of a second.
// Threads and processes that ended are not counted; the tunnels' processes (Go's
// runtime threads, OpenSSH's single-threaded processes) keep theirs.
func treeCPU(roots []int, skip string) (time.Duration, error) {
	children := map[int][]int{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		pid, _ := strconv.Atoi(filepath.Base(dir))
		if ppid, err := parentOf(dir); err == nil {
			children[ppid] = append(children[ppid], pid)
		}
	}
	skipInfo, err := os.Stat(skip)
	if err != nil {
		return 0, err
	}
	var total time.Duration
	seen := map[int]bool{}
	root := map[int]bool{}
	for _, pid := range roots {
		root[pid] = true
	}
	queue := append([]int(nil), roots...)
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		if exe, err := os.Stat(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && os.SameFile(exe, skipInfo) {
			continue
		}
		t, err := processCPU(pid)
		if err != nil && root[pid] {
			return 0, err
		}
		// A descendant that ended since the listing took its time with it.
		total += t
		queue = append(queue, children[pid]...)
	}
	return total, nil
}

// parentOf reads the parent's PID from a /proc/PID directory's stat,
// whose second field (the command's name in parentheses) may hold spaces.
func parentOf(dir string) (int, error) {
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return 0, err
	}
	end := strings.LastIndexByte(string(stat), ')')
	fields := strings.Fields(string(stat[end+1:]))
	if end < 0 || len(fields) < 2 {
		return 0, fmt.Errorf("%s/stat: no parent in %q", dir, stat)
	}
	return strconv.Atoi(fields[1])
}

// processCPU sums the run time of a process's threads.
func processCPU(pid int) (time.Duration, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/[0-9]*", pid))
	if err != nil || len(tasks) == 0 {
		return 0, fmt.Errorf("process %d: no threads to read (ended?)", pid)
	}
	var total time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(t + "/schedstat")
		if err != nil {
			continue // the thread ended since the listing
		}
		fields := strings.Fields(string(b))
		if len(fields) == 0 {
			return 0, fmt.Errorf("%s/schedstat is empty", t)
		}
		ns, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s/schedstat: %v", t, err)
		}
		total += time.Duration(ns)
	}
	return total, nil
}
