package cli

import (
	"errors"
	"syscall"
)

// hostsPath is the machine's hosts file.
const hostsPath = "/etc/hosts"

// setupHow is how plug setup is run here.
const setupHow = "sudo plug setup"

// processAlive reports whether process pid still runs.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
