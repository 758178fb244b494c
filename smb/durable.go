//go:build linux

package smb

import (
	"encoding/binary"
	"slices"
	"sync"
	"time"

	"plug/smb/internal/wire"
)

// Durable and resilient opens (MS-SMB2 3.3.5.9.6 to 3.3.5.9.12, 3.3.5.15.9).
//
// An open is durable when its client asks for it (the DHnQ or DH2Q create
// context) and holds a batch oplock or a lease with handle caching, or
// resilient when it asks with
// FSCTL_LMR_REQUEST_RESILIENCY. When its connection drops, its session is
// logged off or replaced by a reconnect, such an open is parked rather
// than closed: it keeps its descriptor, share mode, oplock, byte-range
// locks and position, and the client takes it back with DHnC or DH2C on
// any new connection and session of the same user, within its timeout.
// A parked open is closed when the timeout passes, and at once when
// another client opens its file (its oplock would have to be broken and
// nobody is there to acknowledge: Windows does the same). Persistent
// handles are not granted (the share is not continuously available).
const (
	ctxDurableRequest     = "DHnQ"
	ctxDurableReconnect   = "DHnC"
	ctxDurableRequestV2   = "DH2Q"
	ctxDurableReconnectV2 = "DH2C"
	// ctxAppInstance names SMB2_CREATE_APP_INSTANCE_ID, a binary GUID.
	ctxAppInstance = "\x45\xBC\xA6\x6A\xEF\xA7\xF7\x4A\x90\x08\xFA\x46\x2E\x14\x4D\x74"

	// durableTimeout is how long a parked durable v1 open waits, and a v2
	// one that asks for no timeout of its own; durableMaxTimeout caps what
	// a v2 client asks for (Windows' 300 s: a client asking for more is
	// given that).
	durableTimeout    = 60 * time.Second
	durableMaxTimeout = 300 * time.Second
	// resilientTimeout is the timeout of a resilient open that asks for
	// none; resilientMaxTimeout is the longest one may ask for (Windows'
	// MaxResiliencyTimeout): more is refused with STATUS_INVALID_PARAMETER.
	resilientTimeout    = 120 * time.Second
	resilientMaxTimeout = 300 * time.Second
	// maxParked is how many parked opens the server keeps at once, all
	// clients together; an open whose client goes away beyond that is
	// closed as if it were not durable. Each keeps a file descriptor, its
	// byte-range locks and under 1 KiB: 4 MiB at most.
	maxParked = 4096

	fsctlRequestResiliency = 0x001401D4
)

// durableState is what makes an open durable or resilient. It is set
// under fileTable.mu and, but for lockSeq, read-only afterwards.
type durableState struct {
	v2         bool
	createGUID [16]byte
	// appInstance is the application instance a v2 open was made for
	// (zero for none): a new open of the file for the same instance
	// closes it (the application moved, MS-SMB2 3.3.5.9.13).
	appInstance [16]byte
	resilient   bool
	timeout     time.Duration
	// user is the account that may reconnect to the open.
	user string
	// timer closes the open once parked for timeout; guarded by
	// parkedOpens.mu.
	timer *time.Timer
	// lockSeq is the lock sequence number of the last LOCK that
	// succeeded in each of the 64 buckets, plus one (0: none), for replay
	// detection (see lock.go); guarded by fileTable.mu.
	lockSeq [64]uint8
}

// parkedOpens are the durable opens whose client is away, by persistent
// FileId.
type parkedOpens struct {
	mu     sync.Mutex
	m      map[uint64]*open
	closed bool // the server is closing: nothing more is parked
}

// durableContext is the create context of q named name, when the
// connection's dialect knows it (the v2 ones came with SMB 3.0).
func (c *conn) durableContext(q *createReq, name string) *createContext {
	if (name == ctxDurableRequestV2 || name == ctxDurableReconnectV2) && c.dialect < wire.Dialect300 {
		return nil
	}
	return q.context(name)
}

// checkDurableContexts refuses the combinations of durable contexts
// MS-SMB2 3.3.5.9 forbids, and contexts of the wrong size.
func (c *conn) checkDurableContexts(q *createReq) uint32 {
	dhq, dhc := c.durableContext(q, ctxDurableRequest), c.durableContext(q, ctxDurableReconnect)
	d2q, d2c := c.durableContext(q, ctxDurableRequestV2), c.durableContext(q, ctxDurableReconnectV2)
	switch {
	case d2c != nil && (dhq != nil || dhc != nil || d2q != nil),
		d2q != nil && (dhq != nil || dhc != nil),
		dhq != nil && len(dhq.data) < 16, dhc != nil && len(dhc.data) < 16,
		d2q != nil && len(d2q.data) < 32, d2c != nil && len(d2c.data) < 36:
		return wire.StatusInvalidParameter
	}
	return wire.StatusSuccess
}

// appInstance is the application instance id q carries, zero for none.
func appInstance(q *createReq) [16]byte {
	var id [16]byte
	if x := q.context(ctxAppInstance); x != nil && len(x.data) >= 20 && binary.LittleEndian.Uint16(x.data) == 20 {
		copy(id[:], x.data[4:20])
	}
	return id
}

// closeAppInstance closes the durable v2 opens of path made for the
// application instance the v2 durable open q asks for is made for: the
// instance moved, and its old opens would only stand in its way.
func (c *conn) closeAppInstance(q *createReq, path string) {
	id := appInstance(q)
	if id == ([16]byte{}) || c.durableContext(q, ctxDurableRequestV2) == nil {
		return
	}
	st, err := c.srv.root.statPath(path)
	if err != nil {
		return
	}
	type stale struct {
		o *open
		c *conn
	}
	var gone []stale
	ft := &c.srv.files
	ft.mu.Lock()
	if n := ft.nodes[st.key()]; n != nil {
		for _, o := range n.opens {
			if o.dur != nil && o.dur.v2 && o.dur.appInstance == id {
				gone = append(gone, stale{o, o.conn})
			}
		}
	}
	ft.mu.Unlock()
	for _, g := range gone {
		if g.c == nil {
			c.srv.purge(g.o, "its application instance opened the file again")
		} else {
			g.c.closeOpen(g.o)
		}
	}
}

// makeDurable makes o, just opened by r, durable when q asks for it and o
// caches its handle, and returns the create context that says so.
func (c *conn) makeDurable(r *request, q *createReq, o *open) [][2][]byte {
	d2q, dhq := c.durableContext(q, ctxDurableRequestV2), c.durableContext(q, ctxDurableRequest)
	if d2q == nil && dhq == nil {
		return nil
	}
	d := &durableState{timeout: durableTimeout, user: r.sess.user}
	le := binary.LittleEndian
	var resp [][2][]byte
	if d2q != nil {
		d.v2 = true
		copy(d.createGUID[:], d2q.data[16:32])
		d.appInstance = appInstance(q)
		if ms := le.Uint32(d2q.data); ms != 0 {
			d.timeout = min(time.Duration(ms)*time.Millisecond, durableMaxTimeout)
		}
		v := le.AppendUint32(nil, uint32(d.timeout/time.Millisecond))
		resp = [][2][]byte{{[]byte(ctxDurableRequestV2), le.AppendUint32(v, 0)}}
	} else {
		resp = [][2][]byte{{[]byte(ctxDurableRequest), make([]byte, 8)}}
	}
	ft := &c.srv.files
	ft.mu.Lock()
	defer ft.mu.Unlock()
	if !o.cachesHandle() {
		return nil
	}
	o.dur = d
	return resp
}

// cachesHandle reports whether o's client may keep it open after its
// application closed it: a batch oplock or a lease with handle caching.
// The caller holds fileTable.mu.
func (o *open) cachesHandle() bool {
	return o.oplock == oplockBatch || o.lease != nil && o.lease.state&leaseH != 0
}

// park keeps o, a durable or resilient open of c that still holds what
// made it durable, for its client to reconnect to; any other open is
// closed.
func (c *conn) park(o *open) {
	s := c.srv
	// A watch ends with the connection either way.
	o.mu.Lock()
	w := o.notify
	o.notify = nil
	o.mu.Unlock()
	if w != nil {
		w.cleanup()
	}
	ft := &s.files
	ft.mu.Lock()
	d := o.dur
	ok := d != nil && o.node != nil && !o.breakingNow() && (d.resilient || o.cachesHandle())
	var waits []*lockWait
	if ok {
		s.parked.mu.Lock()
		ok = !s.parked.closed && len(s.parked.m) < maxParked
		if ok {
			s.parked.m[o.pid] = o
			o.conn, o.tree = nil, nil
			d.timer = time.AfterFunc(d.timeout, func() { s.purge(o, "its client did not come back within "+d.timeout.String()) })
		}
		s.parked.mu.Unlock()
	}
	if ok {
		// Blocking locks it waited for end with the connection.
		n := o.node
		n.waiters = slices.DeleteFunc(n.waiters, func(w *lockWait) bool {
			if w.lk.o == o {
				waits = append(waits, w)
				return true
			}
			return false
		})
	}
	ft.mu.Unlock()
	if !ok {
		if d != nil && s.parkedFull() {
			s.logf("smb: a durable open closed when its client went away: %d opens wait for their clients already", maxParked)
		}
		c.closeOpen(o)
		return
	}
	for _, w := range waits {
		w.op.complete(wire.StatusCancelled, nil)
	}
	c.mu.Lock()
	if c.opens[o.id] == o {
		delete(c.opens, o.id)
	}
	c.mu.Unlock()
}

func (s *Server) parkedFull() bool {
	s.parked.mu.Lock()
	defer s.parked.mu.Unlock()
	return len(s.parked.m) >= maxParked
}

// purge closes o if it is parked, saying why in the log.
func (s *Server) purge(o *open, why string) {
	s.parked.mu.Lock()
	parked := s.parked.m[o.pid] == o
	if parked {
		delete(s.parked.m, o.pid)
		o.dur.timer.Stop()
	}
	s.parked.mu.Unlock()
	if !parked {
		return
	}
	// The file's name is not logged, as no name is.
	s.logf("smb: a durable open closed: %s", why)
	o.io.Lock()
	o.closed = true
	o.io.Unlock()
	s.release(o)
}

// purgeParked closes every parked open, for Close.
func (s *Server) purgeParked() {
	s.parked.mu.Lock()
	s.parked.closed = true
	all := make([]*open, 0, len(s.parked.m))
	for _, o := range s.parked.m {
		all = append(all, o)
	}
	s.parked.mu.Unlock()
	for _, o := range all {
		s.purge(o, "the server stops")
	}
}

// reconnect answers a CREATE with DHnC or DH2C: the parked open it names
// joins r's connection, session and tree, with a new volatile FileId and
// all it held. The other fields of the request are ignored.
func (c *conn) reconnect(r *request, q *createReq) uint32 {
	le := binary.LittleEndian
	var pid uint64
	var guid [16]byte
	v2 := false
	if x := c.durableContext(q, ctxDurableReconnectV2); x != nil {
		pid, v2 = le.Uint64(x.data), true
		copy(guid[:], x.data[16:32])
	} else {
		pid = le.Uint64(c.durableContext(q, ctxDurableReconnect).data)
	}
	c.mu.Lock()
	n := len(c.opens)
	c.mu.Unlock()
	if n >= maxOpens {
		return wire.StatusTooManyOpenedFiles
	}
	ask := c.leaseAsk(q)
	path, pathStatus := c.createPath(q)
	p := &c.srv.parked
	p.mu.Lock()
	o := p.m[pid]
	switch {
	case o == nil || v2 && o.dur.createGUID != guid, // a v1 open's is zero
		// An open with a lease comes back only with its lease's key, to
		// the client that holds it.
		o.lease != nil && (ask == nil || ask.id != o.lease.id):
		p.mu.Unlock()
		return wire.StatusObjectNameNotFound
	case o.dur.user != r.sess.user:
		p.mu.Unlock()
		return wire.StatusAccessDenied
	case o.lease != nil && (pathStatus != wire.StatusSuccess || path != o.node.path):
		// With a lease, unlike an oplock, the name must be the file's.
		p.mu.Unlock()
		return wire.StatusInvalidParameter
	}
	delete(p.m, pid)
	o.dur.timer.Stop()
	p.mu.Unlock()
	ft := &c.srv.files
	ft.mu.Lock()
	o.conn, o.tree, o.encrypted = c, r.tree, r.encrypted
	if o.lease != nil {
		o.ask = ask
	}
	ft.mu.Unlock()
	c.addOpen(o)
	st, err := fstat(o.fd)
	if err != nil {
		c.closeOpen(o)
		return ntStatus(err)
	}
	c.appendCreateResponse(r, q, o, &st, actionOpened, c.leaseContext(o))
	r.chain.file = o
	return wire.StatusSuccess
}

// requestResiliency answers FSCTL_LMR_REQUEST_RESILIENCY: o is kept for
// the timeout asked (resilientTimeout for none) when its client goes
// away, whatever its oplock.
func (c *conn) requestResiliency(o *open, in []byte) uint32 {
	if c.dialect == wire.Dialect202 {
		return wire.StatusInvalidDeviceRequest
	}
	if len(in) < 8 {
		return wire.StatusInvalidParameter
	}
	t := time.Duration(binary.LittleEndian.Uint32(in)) * time.Millisecond
	if t > resilientMaxTimeout {
		return wire.StatusInvalidParameter
	}
	if t == 0 {
		t = resilientTimeout
	}
	ft := &c.srv.files
	ft.mu.Lock()
	o.dur = &durableState{resilient: true, timeout: t, user: o.tree.sess.user}
	ft.mu.Unlock()
	return wire.StatusSuccess
}
