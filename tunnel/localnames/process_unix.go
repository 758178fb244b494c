//go:build !windows

package localnames

import (
	"errors"
	"syscall"
)

// processAlive reports whether process pid still runs.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
