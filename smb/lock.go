//go:build linux

package smb

import (
	"encoding/binary"
	"slices"

	"plug/smb/internal/wire"
)

// LOCK flags.
const (
	lockShared    = 0x01
	lockExclusive = 0x02
	lockUnlock    = 0x04
	lockFailNow   = 0x10
)

// byteLock is a byte-range lock an open holds.
type byteLock struct {
	o      *open
	off, n uint64
	excl   bool
}

// lockWait is a blocking LOCK waiting for a range to be free.
type lockWait struct {
	lk byteLock
	op *asyncOp
}

// rangesMeet reports whether two ranges collide: ranges of bytes that
// share one, or a zero-length range at an offset strictly inside the other
// (Windows' rule); two zero-length ranges never do.
func rangesMeet(aOff, aN, bOff, bN uint64) bool {
	switch {
	case aN == 0 && bN == 0:
		return false
	case aN == 0:
		return bOff < aOff && aOff <= bOff+(bN-1)
	case bN == 0:
		return aOff < bOff && bOff <= aOff+(aN-1)
	}
	return aOff <= bOff+(bN-1) && bOff <= aOff+(aN-1)
}

// lockConflicts reports whether lk cannot be granted among the locks of n:
// an exclusive lock meets no lock at all; a shared one meets no exclusive
// lock of another open (its own may be stacked on).
func (n *fileNode) lockConflicts(lk byteLock) bool {
	for _, l := range n.locks {
		if rangesMeet(l.off, l.n, lk.off, lk.n) && (lk.excl || l.excl && l.o != lk.o) {
			return true
		}
	}
	return false
}

// lockConflict reports whether reading (or writing) the range would break
// a lock: reads meet others' exclusive locks, writes any lock but the
// writer's own exclusive ones.
func (ft *fileTable) lockConflict(o *open, off, n uint64, write bool) bool {
	if n == 0 {
		return false
	}
	ft.mu.Lock()
	defer ft.mu.Unlock()
	if o.node == nil {
		return false
	}
	for _, l := range o.node.locks {
		if !rangesMeet(l.off, l.n, off, n) {
			continue
		}
		if l.o != o && (l.excl || write) || l.o == o && write && !l.excl {
			return true
		}
	}
	return false
}

// dropLocks removes the locks and lock waits of o; the caller holds ft.mu
// and completes the waits it returns.
func (n *fileNode) dropLocks(o *open) []*lockWait {
	n.locks = slices.DeleteFunc(n.locks, func(l byteLock) bool { return l.o == o })
	var gone []*lockWait
	n.waiters = slices.DeleteFunc(n.waiters, func(w *lockWait) bool {
		if w.lk.o == o {
			gone = append(gone, w)
			return true
		}
		return false
	})
	return gone
}

// wake grants the waiting locks of n that have become free.
func (ft *fileTable) wake(n *fileNode) {
	ft.mu.Lock()
	var granted []*lockWait
	n.waiters = slices.DeleteFunc(n.waiters, func(w *lockWait) bool {
		if n.lockConflicts(w.lk) {
			return false
		}
		n.locks = append(n.locks, w.lk)
		granted = append(granted, w)
		return true
	})
	ft.mu.Unlock()
	for _, w := range granted {
		w.op.complete(wire.StatusSuccess, lockBody)
	}
}

func lockBody(b []byte) []byte { return binary.LittleEndian.AppendUint32(b, 4) }

// lockReplay reports whether a LOCK on o with sequence seq repeats one
// that succeeded (MS-SMB2 3.3.5.14): on a durable or resilient open, the
// 4 low bits of seq are a number in the bucket the next bits name (1 to
// 64; others are not checked); a request with the number of the bucket's
// last success is a replay, answered success and not done again, and any
// other forgets that number until it succeeds itself (lockDone). The
// caller holds ft.mu.
func (o *open) lockReplay(seq uint32) bool {
	b := seq >> 4
	if o.dur == nil || b < 1 || b > 64 {
		return false
	}
	if o.dur.lockSeq[b-1] == uint8(seq&0xF)+1 {
		return true
	}
	o.dur.lockSeq[b-1] = 0
	return false
}

// lockDone records that the LOCK on o with sequence seq succeeded, for
// lockReplay. The caller holds ft.mu.
func (o *open) lockDone(seq uint32) {
	if b := seq >> 4; o.dur != nil && b >= 1 && b <= 64 {
		o.dur.lockSeq[b-1] = uint8(seq&0xF) + 1
	}
}

// lock answers LOCK: byte-range locks taken or released all together.
func (c *conn) lock(r *request) uint32 {
	b := r.body
	le := binary.LittleEndian
	count := int(le.Uint16(b[2:]))
	if count == 0 || len(b) < 24+24*count {
		return wire.StatusInvalidParameter
	}
	o, status := c.fileFor(r, b[8:24])
	if status != wire.StatusSuccess {
		return status
	}
	if o.isDir {
		return wire.StatusInvalidParameter
	}
	type elem struct {
		off, n uint64
		flags  uint32
	}
	els := make([]elem, count)
	for i := range els {
		e := b[24+24*i:]
		els[i] = elem{le.Uint64(e), le.Uint64(e[8:]), le.Uint32(e[16:])}
		if els[i].n > 0 && els[i].off+els[i].n-1 < els[i].off {
			return wire.StatusInvalidLockRange
		}
	}
	ft := &c.srv.files
	n := o.node
	seq := le.Uint32(b[4:])
	ft.mu.Lock()
	replay := o.lockReplay(seq)
	ft.mu.Unlock()
	if replay {
		r.out = lockBody(r.out)
		return wire.StatusSuccess
	}
	if els[0].flags&lockUnlock != 0 {
		ft.mu.Lock()
		for _, e := range els {
			if e.flags != lockUnlock {
				ft.mu.Unlock()
				return wire.StatusInvalidParameter
			}
			i := slices.IndexFunc(n.locks, func(l byteLock) bool { return l.o == o && l.off == e.off && l.n == e.n })
			if i < 0 {
				ft.mu.Unlock()
				return wire.StatusRangeNotLocked
			}
			n.locks = slices.Delete(n.locks, i, i+1)
		}
		o.lockDone(seq)
		ft.mu.Unlock()
		ft.wake(n)
		r.out = lockBody(r.out)
		return wire.StatusSuccess
	}
	for _, e := range els {
		switch e.flags &^ lockFailNow {
		case lockShared, lockExclusive:
		default:
			return wire.StatusInvalidParameter
		}
		if count > 1 && e.flags&lockFailNow == 0 {
			return wire.StatusInvalidParameter
		}
	}
	// Read caching of others ends where ranges are locked, as on Windows.
	ft.breakLevelII(o)
	ft.mu.Lock()
	var taken int
	for _, e := range els {
		lk := byteLock{o: o, off: e.off, n: e.n, excl: e.flags&lockExclusive != 0}
		if n.lockConflicts(lk) {
			if e.flags&lockFailNow != 0 {
				n.locks = n.locks[:len(n.locks)-taken]
				ft.mu.Unlock()
				return wire.StatusLockNotGranted
			}
			// A blocking lock (alone in its request): wait for the range.
			w := &lockWait{lk: lk}
			op, st := c.goAsync(r, func() {
				ft.mu.Lock()
				found := false
				n.waiters = slices.DeleteFunc(n.waiters, func(x *lockWait) bool {
					found = found || x == w
					return x == w
				})
				ft.mu.Unlock()
				if found {
					w.op.complete(wire.StatusCancelled, nil)
				}
			})
			if op == nil {
				n.locks = n.locks[:len(n.locks)-taken]
				ft.mu.Unlock()
				return st
			}
			w.op = op
			n.waiters = append(n.waiters, w)
			ft.mu.Unlock()
			return wire.StatusPending
		}
		n.locks = append(n.locks, lk)
		taken++
	}
	o.lockDone(seq)
	ft.mu.Unlock()
	r.out = lockBody(r.out)
	return wire.StatusSuccess
}
