//go:build !windows

package cli

import "os"

// isAdmin reports whether plug runs as root.
func isAdmin() bool { return os.Geteuid() == 0 }
