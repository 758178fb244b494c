//go:build unix

package swarmapi

import (
	"fmt"
	"os"
	"syscall"
)

// socketOwner describes the socket's owner and mode next to plug's own
// ids, " (owner 0:999, mode 0660; plug runs as 65532:65532)", or "" when
// the socket cannot be read.
func socketOwner(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return fmt.Sprintf(" (owner %d:%d, mode %#o; plug runs as %d:%d)",
		st.Uid, st.Gid, fi.Mode().Perm(), os.Getuid(), os.Getgid())
}
