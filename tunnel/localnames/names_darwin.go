package localnames

import (
	"errors"
	"syscall"
)

// SetupHow is how plug setup, which prepares this machine for the names
// once, is run here.
const SetupHow = "sudo plug setup"

// HostsPath is the machine's hosts file.
const HostsPath = "/etc/hosts"

// processAlive reports whether process pid still runs.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
