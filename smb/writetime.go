//go:build linux

package smb

import (
	"time"

	"golang.org/x/sys/unix"
)

// The last write time moves as Windows moves it, not at every write: the
// first write through an open moves it writeTimeDelay later (or at once
// on a flush or a set end of file), later writes through that open leave
// it, and closing an open that wrote since moves it to the time of the
// close. A write time the client sets on an open sticks: writes through
// that open leave it (-1 makes the present one stick, -2 ends that). The
// file on disk carries that time as its mtime, so the pod sees the same.

// writeTimeDelay is how long after an open's first write its file's write
// time moves.
const writeTimeDelay = 2 * time.Second

// writeTime is the write-time state of an open, guarded by open.mu.
type writeTime struct {
	// keep is the mtime a write through the open puts back, once it has
	// written (moved) or the client set one (sticky).
	keep   unix.Timespec
	wrote  bool // a write went through the open
	moved  bool // the write time moved since the first write
	dirty  bool // a write went through since it last moved
	sticky bool
	timer  *time.Timer
}

// beforeWrite readies o's write time for a write through it.
func (c *conn) beforeWrite(o *open) {
	o.mu.Lock()
	defer o.mu.Unlock()
	w := &o.wt
	w.dirty = true
	if w.wrote || w.sticky {
		return
	}
	var st unix.Stat_t
	if unix.Fstat(o.fd, &st) != nil {
		return
	}
	w.wrote, w.keep = true, st.Mtim
	w.timer = time.AfterFunc(writeTimeDelay, func() { c.moveWriteTime(o) })
}

// afterWrite puts back the write time a write through o moved.
func (o *open) afterWrite() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.wt.wrote || o.wt.sticky {
		setMtime(o.fd, o.wt.keep)
	}
}

// moveWriteTime moves o's file's write time to now if o wrote and it has
// not moved since: when the delay after the first write ends, on a flush
// or a set end of file.
func (c *conn) moveWriteTime(o *open) {
	o.io.RLock()
	defer o.io.RUnlock()
	if o.closed {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	w := &o.wt
	if !w.wrote || w.moved || w.sticky {
		return
	}
	w.timer.Stop()
	w.moved, w.dirty = true, false
	w.keep = nowSpec()
	setMtime(o.fd, w.keep)
	c.srv.notifyFiltered(o.node.path, notifyModified, false, filterLastWrite)
}

// closeWriteTime moves the write time of o's file to now when o wrote
// since it last moved (and the client set none), as o closes.
func (o *open) closeWriteTime() {
	o.mu.Lock()
	defer o.mu.Unlock()
	w := &o.wt
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.wrote && w.dirty && !w.sticky {
		w.dirty = false
		setMtime(o.fd, nowSpec())
	}
}

// stickWriteTime records a write time the client set on o (FILETIME
// mtime: -1 the present one, -2 none any more).
func (o *open) stickWriteTime(mtime uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	w := &o.wt
	switch mtime {
	case 0:
		return
	case ^uint64(1):
		w.sticky = false
		return
	}
	var st unix.Stat_t
	if unix.Fstat(o.fd, &st) != nil {
		return
	}
	w.sticky, w.keep = true, st.Mtim
	if w.timer != nil {
		w.timer.Stop()
	}
}

func nowSpec() unix.Timespec {
	return unix.NsecToTimespec(time.Now().UnixNano())
}

// setMtime sets the mtime of the file fd (leaving its atime).
func setMtime(fd int, t unix.Timespec) {
	unix.UtimesNanoAt(unix.AT_FDCWD, procPath(fd), []unix.Timespec{{Nsec: unix.UTIME_OMIT}, t}, 0)
}
