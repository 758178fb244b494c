package cli

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/windows"

	"plug/tunnel/localnames"
)

// isAdmin reports whether plug runs elevated.
func isAdmin() bool { return windows.GetCurrentProcessToken().IsElevated() }

// machineSteps are the changes plug setup makes on Windows.
func machineSteps() []setupStep {
	return []setupStep{
		hostsAccess{user: os.Getenv("USERNAME"), state: filepath.Join(os.Getenv("ProgramData"), "plug", "hosts-writer")},
	}
}

// grantWrite and revokeWrite are the commands that add and remove the
// developer's ACL entry (modify) on the hosts file.
func grantWrite(user string) []string {
	return []string{"icacls", localnames.HostsPath, "/grant", user + ":(M)"}
}

func revokeWrite(user string) []string {
	return []string{"icacls", localnames.HostsPath, "/remove:g", user}
}
