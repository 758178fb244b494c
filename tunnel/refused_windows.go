package tunnel

import (
	"errors"
	"syscall"

	"golang.org/x/sys/windows"
)

// isRefused reports whether a dial failed because nothing listens there.
// Windows reports it as a Winsock error of its own.
func isRefused(err error) bool {
	return errors.Is(err, windows.WSAECONNREFUSED) || errors.Is(err, syscall.ECONNREFUSED)
}

// isPeerReset reports whether the peer reset or aborted a connection.
func isPeerReset(err error) bool {
	return errors.Is(err, windows.WSAECONNRESET) || errors.Is(err, windows.WSAECONNABORTED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE)
}
