package localnames

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// The hosts file is changed by every run on the machine, of any user, at
// any moment, and a run may be killed at any moment. So a change is made
// under a lock on the file that one process holds at a time (lockFile; an
// advisory flock on macOS, a LockFileEx range past the file's end on
// Windows, which readers of the file never meet), from the file as it is
// then, and it writes only what changes: the first byte where the old and
// the new content differ and what follows. The blocks come after the
// user's lines (hostsblock.go), so a change of the blocks never writes a
// byte of the user's lines, and whenever a write stops, the file holds a
// beginning of its new content. It is not written to a new file renamed
// over the old one: that needs the right to write in the hosts file's
// directory (/etc, C:\Windows\System32\drivers\etc), which would let the
// developer replace every file there; plug setup grants the right to write
// the hosts file alone.

// lockWait bounds the wait for the hosts file's lock.
const lockWait = 10 * time.Second

// withLockedFile opens path for reading and writing, holds its lock while
// do runs, and closes it. A file another program has open without sharing
// it (on Windows, a virus scanner reading it) is waited for like the lock.
func withLockedFile(path string, do func(f *os.File) error) error {
	deadline := time.Now().Add(lockWait)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	for pause := time.Millisecond; isBusy(err) && time.Now().Before(deadline); pause = min(2*pause, 10*time.Millisecond) {
		time.Sleep(pause)
		f, err = os.OpenFile(path, os.O_RDWR, 0)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if err := lockFile(f, time.Until(deadline)); err != nil {
		return err
	}
	defer unlockFile(f)
	return do(f)
}

// lockFile takes f's lock, waiting for it at most wait.
func lockFile(f *os.File, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	pause := time.Millisecond
	for {
		ok, err := tryLock(f)
		if err != nil {
			return fmt.Errorf("cannot lock %s: %w", f.Name(), err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("another program has held the lock of %s for over %s (plug runs hold it for milliseconds while they change their names): end plug runs that hang (a lock ends with its process), then run again", f.Name(), wait)
		}
		time.Sleep(pause)
		pause = min(2*pause, 10*time.Millisecond)
	}
}

// readFrom reads f from its first byte.
func readFrom(f *os.File) ([]byte, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

// rewrite makes f, which holds old, hold new, writing from keep on; the
// bytes before keep are the same in both and are not written. It cuts f
// to keep, then writes the rest, its first line (with a line end before
// it) by a write of its own, and syncs: whenever it stops, f holds a beginning of new at least keep
// bytes long.
func rewrite(f *os.File, old, new []byte, keep int) error {
	if keep < len(old) {
		if err := f.Truncate(int64(keep)); err != nil {
			return err
		}
	}
	rest := new[keep:]
	first := len(rest)
	lead := len(rest) - len(bytes.TrimLeft(rest, "\r\n")) // the line end after a last line that had none
	if i := bytes.IndexByte(rest[lead:], '\n'); i >= 0 {
		first = lead + i + 1
	}
	if _, err := f.WriteAt(rest[:first], int64(keep)); err != nil {
		return err
	}
	if _, err := f.WriteAt(rest[first:], int64(keep+first)); err != nil {
		return err
	}
	return f.Sync()
}

// commonPrefix is how many first bytes a and b share.
func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// writeBackup replaces path with content: a new file renamed over it, in
// a directory of the developer's own.
func writeBackup(path string, content []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // once renamed, nothing
	_, err = tmp.Write(content)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
