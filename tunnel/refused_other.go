//go:build !windows

package tunnel

import (
	"errors"
	"syscall"
)

// isRefused reports whether a dial failed because nothing listens there.
func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// isPeerReset reports whether the peer reset or aborted a connection.
func isPeerReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE)
}
