package localnames

import (
	"os"
	"path/filepath"
)

// SetupHow is how plug setup, which prepares this machine for the names
// once, is run here.
const SetupHow = "plug setup, from a Git Bash started as an administrator (plug setup --user ACCOUNT when the account that runs plug is not that administrator)"

// HostsPath is the machine's hosts file.
var HostsPath = filepath.Join(systemRoot(), "System32", "drivers", "etc", "hosts")

func systemRoot() string {
	if r := os.Getenv("SystemRoot"); r != "" {
		return r
	}
	return `C:\Windows`
}
