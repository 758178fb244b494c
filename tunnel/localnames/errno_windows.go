package localnames

import (
	"errors"

	"golang.org/x/sys/windows"
)

// IsAddrInUse reports whether a bind failed because the address and port
// are taken.
func IsAddrInUse(err error) bool {
	return errors.Is(err, windows.WSAEADDRINUSE) || errors.Is(err, windows.WSAEACCES)
}

// isAddrNotAvailable reports whether a bind failed because the address is
// not configured on this machine.
func isAddrNotAvailable(err error) bool { return errors.Is(err, windows.WSAEADDRNOTAVAIL) }

// IsPrivilegedPort is false: Windows has no privileged ports.
func IsPrivilegedPort(error) bool { return false }
