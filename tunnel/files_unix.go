//go:build unix

package tunnel

import "syscall"

// openFileLimit is how many files this process may have open
// (RLIMIT_NOFILE, which the Go runtime raises to its hard limit); 0 when
// unknown.
func openFileLimit() uint64 {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil || l.Cur >= 1<<62 {
		return 0
	}
	return uint64(l.Cur)
}
