package cli

import (
	"errors"
	"syscall"
)

// hostsPath is the machine's hosts file.
const hostsPath = "/etc/hosts"

// processAlive reports whether process pid still runs.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
