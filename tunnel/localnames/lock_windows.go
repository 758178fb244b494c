package localnames

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// lockedRange is the byte the lock covers: far past the end of any hosts
// file, so that Windows, whose locks bar reads of what they cover, never
// bars a reader of the file.
var lockedRange = windows.Overlapped{OffsetHigh: 0x7fffffff}

// tryLock takes f's lock (LockFileEx) if no other open file holds it.
func tryLock(f *os.File) (bool, error) {
	ol := lockedRange
	err := windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, &ol)
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
		return false, nil
	}
	return err == nil, err
}

// isBusy reports whether a file could not be opened because another
// program has it open and does not share it.
func isBusy(err error) bool { return errors.Is(err, windows.ERROR_SHARING_VIOLATION) }

// unlockFile gives f's lock back.
func unlockFile(f *os.File) {
	ol := lockedRange
	windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, &ol)
}
