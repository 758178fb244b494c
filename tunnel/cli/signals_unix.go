//go:build !windows

package cli

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// forwardedSignals are the signals plug passes on to CMD.
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// forward passes sig on to CMD. A Ctrl-C typed in the terminal has already
// reached CMD, which shares plug's process group: passing it on again would
// be a second Ctrl-C, so it is passed on only when plug is not the
// terminal's foreground job (kill -INT, a supervisor, a test).
func forward(p *os.Process, sig os.Signal) {
	if sig == syscall.SIGINT && terminalSentIt() {
		return
	}
	p.Signal(sig)
}

// terminalSentIt reports whether plug's process group is the foreground
// job of the terminal on its standard streams, which is where a keyboard
// Ctrl-C goes.
func terminalSentIt() bool {
	for fd := 0; fd <= 2; fd++ {
		if pgrp, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP); err == nil {
			return pgrp == unix.Getpgrp()
		}
	}
	return false
}

// interrupt stops CMD as a Ctrl-C would.
func interrupt(p *os.Process) { p.Signal(syscall.SIGINT) }

// exitStatus is CMD's exit code, or 128+N when signal N killed it.
func exitStatus(state *os.ProcessState) int {
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return state.ExitCode()
}
