//go:build !windows

package cli

import "os"

// isAdmin reports whether plug runs as root.
func isAdmin() bool { return os.Geteuid() == 0 }

// adminNeeded is what plug setup needs to run as.
const adminNeeded = "root"

// installerHint is how the installer is run here.
const installerHint = "ssh -p PORT get@HOST install | sh"
