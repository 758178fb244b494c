//go:build linux

package smb

import (
	"encoding/binary"
	"time"

	"golang.org/x/sys/unix"

	"plug/smb/internal/wire"
)

// Oplock levels (MS-SMB2 2.2.13); oplockLease marks an open with a lease
// (see lease.go).
const (
	oplockNone      uint8 = 0x00
	oplockLevelII   uint8 = 0x01
	oplockExclusive uint8 = 0x08
	oplockBatch     uint8 = 0x09
	oplockLease     uint8 = 0xFF

	// breakTimeout is how long a holder has to acknowledge a break before
	// it is taken as acknowledged (MS-SMB2's Oplock Break Acknowledgment
	// Timer, 35 s).
	breakTimeout = 35 * time.Second
)

// grantOplock decides the oplock of o, just attached to n: what it asked
// for when it is alone, level II beside others that hold at most that or
// a lease without handle caching, none otherwise; or the lease it asks
// for. The caller holds ft.mu.
func (ft *fileTable) grantOplock(n *fileNode, o *open, asked uint8) {
	o.oplock = oplockNone
	switch asked {
	case oplockLevelII, oplockExclusive, oplockBatch:
	case oplockLease:
		ft.grantLease(n, o)
		return
	default:
		return
	}
	for _, x := range n.opens {
		switch {
		case x == o:
		case x.lease != nil:
			if x.lease.state&(leaseH|leaseW) != 0 || x.lease.breaking {
				return
			}
		case x.oplock > oplockLevelII || x.breaking:
			return
		}
	}
	if len(n.opens) == 1 {
		o.oplock = asked
	} else {
		o.oplock = oplockLevelII
	}
}

// oplockBreak is a break notification to send: to the connection and
// tree the open had when the break was decided.
type oplockBreak struct {
	o     *open
	c     *conn
	t     *tree
	level uint8
}

// opener is an open about to be made, as far as the breaks it needs go.
type opener struct {
	access, share uint32
	overwrite     bool
	deleting      bool      // it deletes the file on close
	lease         *leaseReq // the lease it asks for: its own is not broken
	stream        string    // the named stream it opens (lower case), "" for the file's data
	retry         bool      // it has waited for breaks before
}

// breakFor starts the breaks an open w of path needs: exclusive and batch
// oplocks of others go down to level II, or to none when the open is to
// overwrite; every oplock goes when the opener overwrites. Leases of
// other keys lose write caching, and handle caching too when w's share
// mode would be refused or when w deletes the file; all caching when w
// overwrites. As Windows has
// it, a stat open (no access but to attributes) breaks nothing, and an
// exclusive oplock is not broken for an open that its share mode refuses
// anyway (a batch one is: its holder may close a cached handle); an open
// for MAXIMUM_ALLOWED is judged by the access it would get. A named
// stream's opens are apart from its file's. A parked
// durable open that would have to be told is closed instead. It returns a
// channel closed once the holders have acknowledged (or closed, or timed
// out), nil when there is nothing to wait for: the open waits for oplock
// breaks, and for lease breaks that take write caching (handle caching,
// when its share mode is refused).
func (s *Server) breakFor(path string, w opener) <-chan struct{} {
	if !w.overwrite && w.access&^(accReadAttr|accWriteAttr|accSynchronize) == 0 {
		return nil
	}
	fd, err := s.root.open(path, unix.O_PATH, 0)
	if err != nil {
		return nil
	}
	st, err := fstat(fd)
	if err == nil && w.access&accMaximumAllowed != 0 {
		w.access, _ = grant(w.access, maxAccess(fd, &st))
	}
	unix.Close(fd)
	overwrite := w.overwrite
	if err != nil || !overwrite && w.access&^(accReadAttr|accWriteAttr|accSynchronize) == 0 {
		return nil
	}
	key := st.key()
	key.stream = w.stream
	ft := &s.files
	ft.mu.Lock()
	n := ft.nodes[key]
	if n == nil || n.deletePending {
		// Nothing to break; or the open is refused, breaking nothing.
		ft.mu.Unlock()
		return nil
	}
	var sends []oplockBreak
	var lsends []*leaseBreak
	var purge []*open
	refused := n.conflicts(w.access, w.share)
	// An open that only reads the security descriptor breaks oplocks but
	// no lease.
	leaseStat := !overwrite && w.access&^(accReadAttr|accWriteAttr|accSynchronize|accReadControl) == 0
	seen := map[*lease]bool{}
	delay := false
	for _, o := range n.opens {
		if l := o.lease; l != nil {
			if seen[l] || leaseStat || w.lease != nil && w.lease.id == l.id {
				continue
			}
			seen[l] = true
			// A refused open takes handle caching only (its holder may
			// close the handles it keeps), else write caching goes.
			to := l.state &^ leaseW
			switch {
			case overwrite:
				to = 0
			case refused:
				to = l.state &^ leaseH
			case w.deleting:
				to &^= leaseH // the holder must close the handles it keeps
			}
			// The open waits for the break (as Samba has it) when it takes
			// write caching, or handle caching from a holder its share
			// mode is refused beside; or when the lease was breaking
			// already and the open has waited before.
			mask := leaseW
			if refused {
				mask = leaseH
			}
			breaking := l.breaking
			if l.state&^to == 0 {
				delay = delay || breaking
				continue
			}
			b, p := ft.breakLease(l, to, true)
			if b != nil {
				lsends = append(lsends, b)
			}
			purge = append(purge, p...)
			delay = delay || l.state&mask != 0 || breaking && w.retry
			continue
		}
		switch {
		case o.conn == nil && o.oplock != oplockNone:
			// A parked durable open: no client to tell, so it is closed,
			// as Windows does.
			purge = append(purge, o)
		case o.breaking, o.oplock == oplockExclusive && refused:
		case o.oplock > oplockLevelII:
			o.breaking = true
			o.breakTo = oplockLevelII
			if overwrite {
				o.breakTo = oplockNone
			}
			sends = append(sends, oplockBreak{o, o.conn, o.tree, o.breakTo})
			x := o
			o.breakTimer = time.AfterFunc(breakTimeout, func() { ft.ackBreak(x, x.breakTo) })
		case o.oplock == oplockLevelII && overwrite:
			o.oplock = oplockNone
			sends = append(sends, oplockBreak{o, o.conn, o.tree, oplockNone})
		}
	}
	n.countLevelII()
	var wait chan struct{}
	for _, o := range n.opens {
		delay = delay || o.lease == nil && o.breaking
	}
	if delay {
		if n.breakDone == nil {
			n.breakDone = make(chan struct{})
		}
		wait = n.breakDone
	}
	ft.mu.Unlock()
	for _, o := range purge {
		s.purge(o, "another client opened its file")
	}
	for _, b := range sends {
		b.c.sendBreak(b.o, b.t, b.level)
	}
	for _, b := range lsends {
		b.send()
	}
	return wait
}

// breakWait is the channel closed when the breaks under way on n's opens
// end, nil when none is; the break of the lease own (nil for none) is not
// waited for: an open does not wait for its own lease. The caller holds
// ft.mu.
func (n *fileNode) breakWait(own *leaseID) chan struct{} {
	for _, o := range n.opens {
		if o.breakingNow() && (own == nil || o.lease == nil || o.lease.id != *own) {
			if n.breakDone == nil {
				n.breakDone = make(chan struct{})
			}
			return n.breakDone
		}
	}
	return nil
}

// breakLevelII takes level II oplocks (o's own too, as Windows does) and
// read leases of other keys than o's from the opens of o's file, because
// o changes the file's data or locks a range of it. Such a break is not
// waited for.
func (ft *fileTable) breakLevelII(o *open) {
	ft.mu.Lock()
	var sends []oplockBreak
	var lsends []*leaseBreak
	var purge []*open
	if n := o.node; n != nil && n.levelII > 0 {
		for _, x := range n.opens {
			if l := x.lease; l != nil && l != o.lease && l.state&leaseR != 0 {
				b, p := ft.breakLease(l, 0, true)
				if b != nil {
					lsends = append(lsends, b)
				}
				purge = append(purge, p...)
				continue
			}
			if x.oplock == oplockLevelII && !x.breaking {
				x.oplock = oplockNone
				if x.conn != nil {
					sends = append(sends, oplockBreak{x, x.conn, x.tree, oplockNone})
				}
			}
		}
		n.countLevelII()
	}
	srv := o.conn.srv // o writes: it is not parked
	ft.mu.Unlock()
	for _, x := range purge {
		srv.purge(x, "another client wrote to its file")
	}
	for _, b := range sends {
		b.c.sendBreak(b.o, b.t, oplockNone)
	}
	for _, b := range lsends {
		b.send()
	}
}

// countLevelII refreshes how many opens of n hold level II or a read
// lease, so that writes to a file without any pay nothing for breaks. The
// caller holds ft.mu.
func (n *fileNode) countLevelII() {
	n.levelII = 0
	for _, x := range n.opens {
		if x.oplock == oplockLevelII || x.lease != nil && x.lease.state&leaseR != 0 {
			n.levelII++
		}
	}
}

// breakingNow reports whether o's oplock or lease is being broken. The
// caller holds ft.mu.
func (o *open) breakingNow() bool {
	return o.breaking || o.lease != nil && o.lease.breaking
}

// ackBreak ends o's break at level and wakes the opens waiting for it.
// It reports whether o was breaking.
func (ft *fileTable) ackBreak(o *open, level uint8) bool {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	if !o.breaking {
		return false
	}
	o.breaking = false
	o.oplock = min(level, o.breakTo)
	if o.breakTimer != nil {
		o.breakTimer.Stop()
	}
	if o.node != nil {
		o.node.countLevelII()
		o.node.breaksDone()
	}
	return true
}

// breaksDone closes breakDone once no open of n is breaking. The caller
// holds ft.mu.
func (n *fileNode) breaksDone() {
	if n.breakDone == nil {
		return
	}
	for _, o := range n.opens {
		if o.breakingNow() {
			return
		}
	}
	close(n.breakDone)
	n.breakDone = nil
}

// sendBreak tells the client of o, opened on t, that its oplock is
// broken to level.
func (c *conn) sendBreak(o *open, t *tree, level uint8) {
	c.sendNotice(o, t, t.sess.id, t.id, func(out []byte) []byte {
		le := binary.LittleEndian
		out = le.AppendUint16(out, 24)
		out = append(out, level, 0)
		out = le.AppendUint32(out, 0)
		return appendFileID(out, o)
	})
}

// sendNotice sends a break notification about o, opened on t: an
// OPLOCK_BREAK message of the server's own, with sessionID and treeID in
// its header and the body body appends, encrypted when o was opened so.
func (c *conn) sendNotice(o *open, t *tree, sessionID uint64, treeID uint32, body func([]byte) []byte) {
	out := c.srv.getBuf(smallBuf)[:headroom]
	defer func() { c.srv.putBuf(out) }()
	hdr := len(out)
	h := wire.Header{Command: wire.OplockBreak, Flags: wire.FlagResponse, MessageID: ^uint64(0), SessionID: sessionID, TreeID: treeID}
	out = append(out, make([]byte, wire.HeaderSize)...)
	h.Put(out[hdr:])
	out = body(out)
	var enc *session
	if s := t.sess; s.sealer != nil && o.encrypted {
		enc = s
	}
	c.send(&out, []outMsg{{start: hdr, end: len(out)}}, enc)
}

// oplockAck answers the acknowledgment of an oplock break, or of a lease
// break (StructureSize 36).
func (c *conn) oplockAck(r *request) uint32 {
	b := r.body
	le := binary.LittleEndian
	switch {
	case len(b) >= 36 && le.Uint16(b) == 36:
		return c.leaseAck(r)
	case len(b) < 24 || le.Uint16(b) != 24:
		return wire.StatusInvalidParameter
	}
	o, status := c.fileFor(r, b[8:24])
	if status != wire.StatusSuccess {
		return status
	}
	level := b[2]
	if level != oplockNone && level != oplockLevelII || !c.srv.files.ackBreak(o, level) {
		return wire.StatusInvalidOplockProtocol
	}
	out := le.AppendUint16(r.out, 24)
	out = append(out, level, 0)
	out = le.AppendUint32(out, 0)
	r.out = appendFileID(out, o)
	return wire.StatusSuccess
}
