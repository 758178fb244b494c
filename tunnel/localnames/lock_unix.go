//go:build !windows

package localnames

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// tryLock takes f's lock (flock) if no other open file holds it.
func tryLock(f *os.File) (bool, error) {
	err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}

// isBusy is false: files are shared here.
func isBusy(error) bool { return false }

// unlockFile gives f's lock back.
func unlockFile(f *os.File) { unix.Flock(int(f.Fd()), unix.LOCK_UN) }
