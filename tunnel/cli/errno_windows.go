package cli

import (
	"errors"

	"golang.org/x/sys/windows"
)

// isAddrInUse reports whether a bind failed because the address and port
// are taken.
func isAddrInUse(err error) bool {
	return errors.Is(err, windows.WSAEADDRINUSE) || errors.Is(err, windows.WSAEACCES)
}

// isAddrNotAvailable reports whether a bind failed because the address is
// not configured on this machine.
func isAddrNotAvailable(err error) bool { return errors.Is(err, windows.WSAEADDRNOTAVAIL) }

// isPrivilegedPort is false: Windows has no privileged ports.
func isPrivilegedPort(error) bool { return false }
