//go:build linux

package smb

import (
	"encoding/binary"
	"time"

	"plug/smb/internal/wire"
)

// Oplock levels (MS-SMB2 2.2.13). Leases are never granted: a request for
// one gets no oplock.
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
// for when it is alone, level II beside others that hold at most that,
// none otherwise. The caller holds ft.mu.
func (n *fileNode) grantOplock(o *open, asked uint8) {
	o.oplock = oplockNone
	switch asked {
	case oplockLevelII, oplockExclusive, oplockBatch:
	default:
		return
	}
	for _, x := range n.opens {
		if x != o && (x.oplock > oplockLevelII || x.breaking) {
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

// breakFor starts the breaks an open of path with access and share needs:
// exclusive and batch oplocks of others go down to level II, or to none
// when the open is to overwrite; every oplock goes when the opener
// overwrites. As Windows has it, a stat open (no access but to
// attributes) breaks nothing, and an exclusive oplock is not broken for
// an open that its share mode refuses anyway (a batch one is: its holder
// may close a cached handle). It returns a
// channel closed once the holders have acknowledged (or closed, or timed
// out), nil when there is nothing to wait for.
func (s *Server) breakFor(path string, overwrite bool, access, share uint32) <-chan struct{} {
	if !overwrite && access&^(accReadAttr|accWriteAttr|accSynchronize) == 0 {
		return nil
	}
	st, err := s.root.statPath(path)
	if err != nil {
		return nil
	}
	ft := &s.files
	ft.mu.Lock()
	n := ft.nodes[st.key()]
	if n == nil {
		ft.mu.Unlock()
		return nil
	}
	var sends []oplockBreak
	var purge []*open
	refused := n.conflicts(access, share)
	for _, o := range n.opens {
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
	var wait chan struct{}
	for _, o := range n.opens {
		if o.breaking {
			if n.breakDone == nil {
				n.breakDone = make(chan struct{})
			}
			wait = n.breakDone
		}
	}
	ft.mu.Unlock()
	for _, o := range purge {
		s.purge(o, "another client opened its file")
	}
	for _, b := range sends {
		b.c.sendBreak(b.o, b.t, b.level)
	}
	return wait
}

// breakLevelII takes level II oplocks from the opens of o's file other
// than o, because o changes the file's data. Such a break is not
// acknowledged.
func (ft *fileTable) breakLevelII(o *open) {
	ft.mu.Lock()
	var sends []oplockBreak
	if n := o.node; n != nil && n.levelII > 0 {
		for _, x := range n.opens {
			if x != o && x.oplock == oplockLevelII && !x.breaking {
				x.oplock = oplockNone
				if x.conn != nil {
					sends = append(sends, oplockBreak{x, x.conn, x.tree, oplockNone})
				}
			}
		}
		n.countLevelII()
	}
	ft.mu.Unlock()
	for _, b := range sends {
		b.c.sendBreak(b.o, b.t, oplockNone)
	}
}

// countLevelII refreshes how many opens of n hold level II, so that
// writes to a file without any pay nothing for breaks. The caller holds
// ft.mu.
func (n *fileNode) countLevelII() {
	n.levelII = 0
	for _, x := range n.opens {
		if x.oplock == oplockLevelII {
			n.levelII++
		}
	}
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
		if o.breaking {
			return
		}
	}
	close(n.breakDone)
	n.breakDone = nil
}

// sendBreak tells the client of o, opened on t, that its oplock is
// broken to level.
func (c *conn) sendBreak(o *open, t *tree, level uint8) {
	out := c.srv.getBuf(smallBuf)[:headroom]
	defer func() { c.srv.putBuf(out) }()
	hdr := len(out)
	h := wire.Header{Command: wire.OplockBreak, Flags: wire.FlagResponse, MessageID: ^uint64(0), SessionID: t.sess.id, TreeID: t.id}
	out = append(out, make([]byte, wire.HeaderSize)...)
	h.Put(out[hdr:])
	le := binary.LittleEndian
	out = le.AppendUint16(out, 24)
	out = append(out, level, 0)
	out = le.AppendUint32(out, 0)
	out = appendFileID(out, o)
	var enc *session
	if s := t.sess; s.sealer != nil && o.encrypted {
		enc = s
	}
	c.send(&out, []outMsg{{start: hdr, end: len(out)}}, enc)
}

// oplockAck answers the acknowledgment of an oplock break.
func (c *conn) oplockAck(r *request) uint32 {
	b := r.body
	le := binary.LittleEndian
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
