//go:build darwin || windows

package localnames

import (
	"fmt"
	"os"
	"path/filepath"
)

// NewResolver repairs what crashed runs left in the hosts file, and checks
// that the file may be written. dir is the developer's plug directory,
// where the hosts file's own lines are backed up (BackupName).
func NewResolver(_, dir string, say func(string)) (Resolver, error) {
	return NewHostsFileResolver(HostsPath, filepath.Join(dir, BackupName), os.Getpid(), say)
}

// Helper is the names helper of Linux, which other systems do not need:
// it only says so.
func Helper([]string) int {
	fmt.Fprintln(os.Stderr, "plug: "+HelperArg+" is run by plug itself, on Linux")
	return 2
}

// Mode says how a run makes the names resolve here: all at start, in the
// machine's hosts file, which nothing can make cheaper (improvable is
// false).
func Mode() (how string, improvable bool) { return errHostsFileEager.Error(), false }
