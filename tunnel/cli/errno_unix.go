//go:build !windows

package cli

import (
	"errors"
	"syscall"
)

// isAddrInUse reports whether a bind failed because the address and port
// are taken.
func isAddrInUse(err error) bool { return errors.Is(err, syscall.EADDRINUSE) }

// isAddrNotAvailable reports whether a bind failed because the address is
// not configured on this machine.
func isAddrNotAvailable(err error) bool { return errors.Is(err, syscall.EADDRNOTAVAIL) }

// isPrivilegedPort reports whether a bind failed because the port is below
// the first one unprivileged programs may bind.
func isPrivilegedPort(err error) bool {
	return errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM)
}
