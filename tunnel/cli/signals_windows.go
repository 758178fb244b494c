package cli

import (
	"os"
	"syscall"
)

// forwardedSignals are the console events plug watches: Ctrl-C, and
// closing the console (SIGTERM).
var forwardedSignals = []os.Signal{os.Interrupt, syscall.SIGTERM}

// forward does nothing on Windows: console events reach every process of
// the console, CMD included, and a single process cannot be sent one.
func forward(*os.Process, os.Signal) {}

// interrupt stops CMD. Windows cannot send a Ctrl-C to one process, so it
// is terminated.
func interrupt(p *os.Process) { p.Kill() }

// exitStatus is CMD's exit code.
func exitStatus(state *os.ProcessState) int { return state.ExitCode() }
