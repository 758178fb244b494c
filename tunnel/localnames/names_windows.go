package localnames

import (
	"os"
	"path/filepath"
)

// SetupHow is how plug setup, which prepares this machine for the names
// once, is run here.
const SetupHow = "plug setup, in a Git Bash started as an administrator (with --user ACCOUNT, the account that runs plug, when the administrator is another account)"

// HostsPath is the machine's hosts file.
var HostsPath = filepath.Join(systemRoot(), "System32", "drivers", "etc", "hosts")

func systemRoot() string {
	if r := os.Getenv("SystemRoot"); r != "" {
		return r
	}
	return `C:\Windows`
}
