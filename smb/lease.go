//go:build linux

package smb

import (
	"encoding/binary"
	"time"

	"plug/smb/internal/wire"
)

// Leases (MS-SMB2 3.3.5.9.8, 3.3.5.9.11, 3.3.4.7, 3.3.5.22.2), v1 on SMB
// 2.1 and v1 or v2 on SMB 3, on files (directories are not leased: the
// server does not offer directory leasing).
//
// A lease is a client's caching of one file under a key it chooses:
// read (R), handle (H: it may keep the file open after the application
// closed it) and write (W) caching. All opens of the file with the same
// client GUID and key share it. The grants follow Windows': R, RH, RW and
// RWH are granted as asked (H or W without R gets nothing); W only while
// no open of another key is on the file (stat opens, with no access but
// to attributes, do not count); H not beside another open's oplock. A
// lease is upgraded when all the state asked may be had, and never
// downgraded by a request. An open of another key takes
// W away, and H too when its share mode would otherwise be refused; an
// overwrite takes everything; a write or a byte-range lock by another key
// takes R; a rename by another key takes H. Breaking a lease that caches
// writes or handles waits for the client's acknowledgment (breakTimeout
// at most), and so does the open that caused it when it took W (or H,
// its share mode refused); what opens need meanwhile is asked once the
// client acknowledges (see leaseAcked).
const (
	leaseR uint32 = 0x01
	leaseH uint32 = 0x02
	leaseW uint32 = 0x04

	ctxLease = "RqLs"

	leaseFlagBreaking  uint32 = 0x02
	leaseFlagParentKey uint32 = 0x04
	leaseAckRequired   uint32 = 0x01
)

// leaseID names a lease: the client's GUID and the key it chose.
type leaseID struct{ client, key [16]byte }

// leaseReq is a lease a CREATE asks for.
type leaseReq struct {
	id        leaseID
	state     uint32
	v2        bool
	parent    [16]byte
	hasParent bool
	epoch     uint16
}

// lease is a granted lease. Its fields are guarded by fileTable.mu.
type lease struct {
	id       leaseID
	node     *fileNode
	state    uint32
	epoch    uint16
	v2       bool // made by a v2 request: answered in v2 to every open
	parent   *[16]byte
	opens    int
	breaking bool
	breakTo  uint32
	// breakReq is the least state an open has needed while the break
	// was under way: where the breaks after it go.
	breakReq  uint32
	breakWait *time.Timer
}

// leaseAsk is the lease q asks for, nil for none or on SMB 2.0.2.
func (c *conn) leaseAsk(q *createReq) *leaseReq {
	x := q.context(ctxLease)
	if x == nil || c.dialect < wire.Dialect210 || len(x.data) < 32 {
		return nil
	}
	le := binary.LittleEndian
	lr := &leaseReq{state: le.Uint32(x.data[16:]) & (leaseR | leaseH | leaseW)}
	lr.id.client = c.clientGUID
	copy(lr.id.key[:], x.data)
	if len(x.data) >= 52 && c.dialect >= wire.Dialect300 {
		lr.v2 = true
		if le.Uint32(x.data[20:])&leaseFlagParentKey != 0 {
			lr.hasParent = true
			copy(lr.parent[:], x.data[32:48])
		}
		lr.epoch = le.Uint16(x.data[48:])
	}
	if lr.state&leaseR == 0 {
		lr.state = 0 // H or W without R is not granted
	}
	return lr
}

// leaseElsewhere reports whether the lease lr names is held on another
// file than path: one key leases one file.
func (ft *fileTable) leaseElsewhere(lr *leaseReq, path string) bool {
	if lr == nil {
		return false
	}
	ft.mu.Lock()
	defer ft.mu.Unlock()
	l := ft.leases[lr.id]
	return l != nil && l.node.path != path
}

// grantLease gives o, just attached to n, the lease it asks for, or
// joins it to its key's lease, upgraded when that may be. The caller
// holds ft.mu.
func (ft *fileTable) grantLease(n *fileNode, o *open) {
	lr := o.ask
	if lr == nil || o.isDir {
		return
	}
	o.oplock = oplockLease
	l := ft.leases[lr.id]
	if l != nil && l.node != n {
		o.oplock = oplockNone // the key is another file's (checked before, raced)
		return
	}
	// What the other opens of the file allow.
	allowed := leaseR | leaseH | leaseW
	for _, x := range n.opens {
		if x == o || l != nil && x.lease == l || x.lease == nil && x.access&^(accReadAttr|accWriteAttr|accSynchronize) == 0 {
			continue
		}
		allowed &^= leaseW
		switch {
		case x.lease != nil:
		case x.oplock > oplockLevelII || x.breaking:
			allowed = 0
		case x.oplock == oplockLevelII:
			allowed &^= leaseH
		}
	}
	if l == nil {
		l = &lease{id: lr.id, node: n, state: lr.state & allowed, v2: lr.v2}
		if l.v2 {
			l.epoch = lr.epoch + 1
		}
		if lr.hasParent {
			l.parent = &lr.parent
		}
		ft.leases[lr.id] = l
	} else if !l.breaking && lr.state&l.state == l.state && lr.state != l.state && lr.state&allowed == lr.state {
		l.state = lr.state
		if l.v2 {
			l.epoch++
		}
	}
	l.opens++
	o.lease = l
}

// dropLease detaches o from its lease, which goes with its last open.
// The caller holds ft.mu.
func (ft *fileTable) dropLease(o *open) {
	l := o.lease
	if l == nil {
		return
	}
	o.lease = nil
	l.opens--
	if l.opens > 0 {
		return
	}
	if l.breaking {
		l.breaking = false
		l.breakWait.Stop()
	}
	if ft.leases[l.id] == l {
		delete(ft.leases, l.id)
	}
}

// leaseBreak is a lease break notification to send.
type leaseBreak struct {
	c        *conn
	o        *open
	t        *tree
	id       leaseID
	from, to uint32
	epoch    uint16
	ack      bool
}

// breakLease starts breaking l to the state to (or, if it is breaking
// already, notes that it is to go there next): at once when its client
// need not acknowledge, else when it does or breakTimeout passes; a v2
// lease's epoch moves with newEpoch (not for the breaks that continue an
// acknowledged one, as on Samba). It returns the notification to send and
// the parked opens of l to close (nobody is there to be told). The
// caller holds ft.mu.
func (ft *fileTable) breakLease(l *lease, to uint32, newEpoch bool) (*leaseBreak, []*open) {
	if l.breaking {
		l.breakReq &= to // asked once this break ends (see leaseAcked)
		return nil, nil
	}
	if to&l.state == l.state {
		return nil, nil
	}
	to &= l.state
	var purge []*open
	var live *open
	for _, x := range l.node.opens {
		if x.lease != l {
			continue
		}
		if x.conn == nil {
			purge = append(purge, x)
		} else if live == nil {
			live = x
		}
	}
	if live == nil {
		l.state = to
		return nil, purge
	}
	b := &leaseBreak{c: live.conn, o: live, t: live.tree, id: l.id, from: l.state, to: to, ack: l.state&(leaseW|leaseH) != 0}
	if l.v2 {
		if newEpoch {
			l.epoch++
		}
		b.epoch = l.epoch
	}
	if b.ack {
		l.breaking, l.breakTo, l.breakReq = true, to, to
		// Unacknowledged, the lease is lost altogether, as on Windows.
		l.breakWait = time.AfterFunc(breakTimeout, func() { ft.leaseAcked(l, 0) })
	} else {
		l.state = to
	}
	return b, purge
}

// breakHandleCaching starts taking handle caching from the leases of
// other keys than o's on o's file, as renaming it needs (MS-SMB2
// 3.3.5.21.1): their holders must close the handles they keep under the
// old name. It returns the channel closed once those breaks (and any
// other under way on the file) have ended, nil when there is nothing to
// wait for.
func (s *Server) breakHandleCaching(o *open) <-chan struct{} {
	ft := &s.files
	ft.mu.Lock()
	n := o.node
	if n == nil {
		ft.mu.Unlock()
		return nil
	}
	var sends []*leaseBreak
	var purge []*open
	for _, x := range n.opens {
		if l := x.lease; l != nil && l != o.lease && l.state&leaseH != 0 {
			b, p := ft.breakLease(l, l.state&^leaseH, true)
			if b != nil {
				sends = append(sends, b)
			}
			purge = append(purge, p...)
		}
	}
	var own *leaseID
	if o.lease != nil {
		own = &o.lease.id
	}
	wait := n.breakWait(own)
	ft.mu.Unlock()
	for _, x := range purge {
		s.purge(x, "another client renamed its file")
	}
	for _, b := range sends {
		b.send()
	}
	return wait
}

// leaseAcked ends l's break at state (within what it breaks to) and wakes
// the opens waiting for it, or, when opens have needed less meanwhile,
// starts the next break, as Samba does: to R while the state has more
// (a break its holder acknowledges), then to what they need. It reports
// whether l was breaking.
func (ft *fileTable) leaseAcked(l *lease, state uint32) bool {
	ft.mu.Lock()
	if !l.breaking {
		ft.mu.Unlock()
		return false
	}
	l.breaking = false
	l.breakWait.Stop()
	l.state = state & l.breakTo
	var next *leaseBreak
	var purge []*open
	if want := l.breakReq & l.state; want != l.state {
		to := want
		if l.state&(leaseH|leaseW) != 0 {
			to |= l.state & leaseR
		}
		next, purge = ft.breakLease(l, to, false)
		if l.breaking {
			l.breakReq = want // where the next goes
		} else {
			l.state = want // a break from R alone is not acknowledged
		}
	}
	l.node.countLevelII()
	l.node.breaksDone()
	ft.mu.Unlock()
	for _, x := range purge {
		ft.srv.purge(x, "another client opened its file")
	}
	if next != nil {
		next.send()
	}
	return true
}

// send sends the lease break notification b (MS-SMB2 2.2.23.2).
func (b *leaseBreak) send() {
	le := binary.LittleEndian
	flags := uint32(0)
	if b.ack {
		flags = leaseAckRequired
	}
	b.c.sendNotice(b.o, b.t, 0, 0, func(out []byte) []byte {
		out = le.AppendUint16(out, 44)
		out = le.AppendUint16(out, b.epoch)
		out = le.AppendUint32(out, flags)
		out = append(out, b.id.key[:]...)
		out = le.AppendUint32(out, b.from)
		out = le.AppendUint32(out, b.to)
		return append(out, make([]byte, 12)...) // reason, access and share hints
	})
}

// leaseAck answers a lease break acknowledgment (MS-SMB2 3.3.5.22.2).
func (c *conn) leaseAck(r *request) uint32 {
	b := r.body
	if len(b) < 36 {
		return wire.StatusInvalidParameter
	}
	le := binary.LittleEndian
	id := leaseID{client: c.clientGUID}
	copy(id.key[:], b[8:24])
	state := le.Uint32(b[24:])
	ft := &c.srv.files
	ft.mu.Lock()
	l := ft.leases[id]
	var status uint32 = wire.StatusSuccess
	switch {
	case l == nil:
		status = wire.StatusObjectNameNotFound
	case !l.breaking:
		status = wire.StatusUnsuccessful
	case state&^l.breakTo != 0:
		status = wire.StatusRequestNotAccepted
	}
	ft.mu.Unlock()
	if status != wire.StatusSuccess {
		return status
	}
	ft.leaseAcked(l, state)
	out := le.AppendUint16(r.out, 36)
	out = append(out, 0, 0, 0, 0, 0, 0)
	out = append(out, id.key[:]...)
	out = le.AppendUint32(out, state)
	r.out = append(out, make([]byte, 8)...)
	return wire.StatusSuccess
}

// leaseContext is the lease response context for o, opened or
// reconnected with a lease request, in the version the lease was made
// with.
func (c *conn) leaseContext(o *open) [][2][]byte {
	ft := &c.srv.files
	ft.mu.Lock()
	defer ft.mu.Unlock()
	lr, l := o.ask, o.lease
	if lr == nil || l == nil {
		return nil
	}
	le := binary.LittleEndian
	v := append([]byte(nil), l.id.key[:]...)
	v = le.AppendUint32(v, l.state)
	var flags uint32
	if l.breaking {
		flags |= leaseFlagBreaking
	}
	if l.parent != nil {
		flags |= leaseFlagParentKey
	}
	v = le.AppendUint32(v, flags)
	v = le.AppendUint64(v, 0)
	if l.v2 {
		if l.parent != nil {
			v = append(v, l.parent[:]...)
		} else {
			v = append(v, make([]byte, 16)...)
		}
		v = le.AppendUint16(v, l.epoch)
		v = le.AppendUint16(v, 0)
	}
	return [][2][]byte{{[]byte(ctxLease), v}}
}
