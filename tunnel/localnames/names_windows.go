package localnames

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/windows"
)

// SetupHow is how plug setup, which prepares this machine for the names
// once, is run here.
const SetupHow = "run plug setup in a Git Bash started as Administrator, from your own account"

// HostsPath is the machine's hosts file.
var HostsPath = filepath.Join(systemRoot(), "System32", "drivers", "etc", "hosts")

func systemRoot() string {
	if r := os.Getenv("SystemRoot"); r != "" {
		return r
	}
	return `C:\Windows`
}

// processAlive reports whether process pid still runs.
func processAlive(pid int) bool {
	h, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, uint32(pid))
	if err != nil {
		return false
	}
	defer windows.CloseHandle(h)
	var code uint32
	const stillActive = 259
	return windows.GetExitCodeProcess(h, &code) == nil && code == stillActive
}
