package main

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestTreeCPUCountsDescendantsButTheSkippedFile: a busy child counts in its
// parent's tree, unless it runs the file left out (the bench tool).
func TestTreeCPUCountsDescendantsButTheSkippedFile(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	busy := exec.Command(sh, "-c", "while :; do :; done")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { busy.Process.Kill(); busy.Wait() }()
	const spent = 200 * time.Millisecond
	deadline := time.Now().Add(30 * time.Second)
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for {
		child, err := processCPU(busy.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if child >= spent {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the busy child spent only %v in 30 s", child)
		}
		<-poll.C
	}
	self := os.Getpid()
	all, err := treeCPU([]int{self}, os.DevNull) // no process runs it
	if err != nil {
		t.Fatal(err)
	}
	own, err := processCPU(self)
	if err != nil {
		t.Fatal(err)
	}
	if all < own+spent {
		t.Fatalf("the tree spent %v, but this process alone spent %v and its child %v", all, own, spent)
	}
	withoutChild, err := treeCPU([]int{self}, sh)
	if err != nil {
		t.Fatal(err)
	}
	if own, err = processCPU(self); err != nil {
		t.Fatal(err)
	}
	if withoutChild > own+spent/2 {
		t.Fatalf("the tree without the child's file spent %v, this process alone %v: the child was counted", withoutChild, own)
	}
}
