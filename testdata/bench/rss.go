package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// rssSampler follows the resident memory of the agent's process, found on
// this machine (the node) through its pod's UID in the process's cgroup.
type rssSampler struct {
	d    *driver
	quit chan struct{}

	mu   sync.Mutex
	pid  int
	max  int64
	last int64
	err  error
}

const rssEvery = 100 * time.Millisecond

func newRSSSampler(d *driver) *rssSampler {
	s := &rssSampler{d: d, quit: make(chan struct{})}
	go s.loop()
	return s
}

func (s *rssSampler) stop() { close(s.quit) }

func (s *rssSampler) loop() {
	t := time.NewTicker(rssEvery)
	defer t.Stop()
	for {
		s.sample()
		select {
		case <-s.quit:
			return
		case <-t.C:
		}
	}
}

func (s *rssSampler) sample() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pid == 0 {
		s.pid, s.err = s.find()
		if s.err != nil {
			return
		}
	}
	rss, err := readRSS(s.pid)
	if err != nil { // the agent restarted: find it again next time
		s.pid, s.err = 0, err
		return
	}
	s.last, s.max = rss, max(s.max, rss)
}

// releaseWithin is how soon the agent gives back what a burst left
// (tunnel/scavenge.go: at most every 10 s while it stays busy).
const releaseWithin = 10 * time.Second

// idle returns the agent's memory once it has had releaseWithin to give
// back what a burst left, read as settle reads it.
func (s *rssSampler) idle() (int64, error) {
	time.Sleep(releaseWithin)
	return s.settle()
}

// settle waits until the agent's memory has not changed by more than 1 %
// for two seconds (at most 30 s), and returns it.
func (s *rssSampler) settle() (int64, error) {
	var prev int64
	stable := time.Time{}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
		s.mu.Lock()
		cur, err := s.last, s.err
		s.mu.Unlock()
		if cur == 0 {
			if err != nil && time.Now().After(deadline.Add(-20*time.Second)) {
				return 0, err
			}
			continue
		}
		if prev == 0 || abs(cur-prev)*100 > prev {
			prev, stable = cur, time.Now()
			continue
		}
		if time.Since(stable) >= 2*time.Second {
			return cur, nil
		}
	}
	if prev == 0 {
		return 0, errors.New("the agent's process was not found")
	}
	return prev, nil
}

func abs(x int64) int64 { return max(x, -x) }

func (s *rssSampler) reset() {
	s.mu.Lock()
	s.max = s.last
	s.mu.Unlock()
}

func (s *rssSampler) peak() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.max
}

// find returns the PID of `/plug agent` in the cgroup of the agent pod.
func (s *rssSampler) find() (int, error) {
	out, err := output(s.d.kubectlCmd("get", "pod", "-l", "app.kubernetes.io/name=plug",
		"--field-selector=status.phase=Running", "-o", "jsonpath={.items[0].metadata.uid}"))
	if err != nil {
		return 0, err
	}
	uid := strings.TrimSpace(out)
	if uid == "" {
		return 0, errors.New("no running agent pod")
	}
	forms := []string{uid, strings.ReplaceAll(uid, "-", "_")} // cgroupfs and systemd drivers
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range procs {
		cmdline, err := os.ReadFile(dir + "/cmdline")
		if err != nil || !bytes.HasSuffix(cmdline, []byte("plug\x00agent\x00")) {
			continue
		}
		cgroup, _ := os.ReadFile(dir + "/cgroup")
		for _, f := range forms {
			if bytes.Contains(cgroup, []byte(f)) {
				return strconv.Atoi(filepath.Base(dir))
			}
		}
	}
	return 0, fmt.Errorf("no process of pod %s runs plug agent", uid)
}

// readRSS returns VmRSS of a process, in bytes.
func readRSS(pid int) (int64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("process %d has no VmRSS", pid)
}

// pidNow is the agent's process as last found, 0 if not found.
func (s *rssSampler) pidNow() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pid
}

// current is the agent's memory as last sampled.
func (s *rssSampler) current() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}
