//go:build !windows

package localnames

import (
	"errors"
	"syscall"
)

// IsAddrInUse reports whether a bind failed because the address and port
// are taken.
func IsAddrInUse(err error) bool { return errors.Is(err, syscall.EADDRINUSE) }

// isAddrNotAvailable reports whether a bind failed because the address is
// not configured on this machine.
func isAddrNotAvailable(err error) bool { return errors.Is(err, syscall.EADDRNOTAVAIL) }

// IsPrivilegedPort reports whether a bind failed because the port is below
// the first one unprivileged programs may bind.
func IsPrivilegedPort(err error) bool {
	return errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM)
}
