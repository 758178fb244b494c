//go:build !windows

package tunnel

import (
	"errors"
	"syscall"
)

// isRefused reports whether a dial failed because nothing listens there.
func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
