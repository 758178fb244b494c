package main

import (
	"os"
	"os/signal"
	"syscall"
)

// pause holds a pod's namespaces: it sleeps until SIGTERM or SIGINT and, as
// the sandbox's PID 1, reaps every child that exits in the meantime.
func pause() error {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			return nil
		}
		reap()
	}
	return nil
}

// reap collects every child that has exited, without blocking.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
