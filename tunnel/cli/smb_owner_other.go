//go:build !linux

package cli

import "errors"

// becomeOwner is Linux's alone: the SMB server runs on Linux only.
func becomeOwner(string) (int, int, error) {
	return 0, 0, errors.New("--as-owner works on Linux only")
}
