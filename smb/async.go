//go:build linux

package smb

import (
	"sync"

	"plug/smb/internal/wire"
)

// asyncOp is a request answered later (MS-SMB2 3.3.4.2): at once with an
// interim STATUS_PENDING response that names it by an async id, then with
// its final response, or STATUS_CANCELLED when a CANCEL names it.
type asyncOp struct {
	c         *conn
	id        uint64
	h         wire.Header
	sess      *session
	tree      *tree
	encrypted bool
	signed    bool
	sent      chan struct{} // closed once the interim response has gone
	once      sync.Once
	onCancel  func()
}

// goAsync makes r an asynchronous request; onCancel must make the handler
// complete it with STATUS_CANCELLED. It returns nil and the status to fail
// r with when r cannot wait: the connection has maxPending waiting
// already, or r is not the last of a compound chain (which Windows fails
// with STATUS_INTERNAL_ERROR).
func (c *conn) goAsync(r *request, onCancel func()) (*asyncOp, uint32) {
	if !r.chain.last {
		return nil, wire.StatusInternalError
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) >= maxPending || c.done {
		return nil, wire.StatusInsufficientResources
	}
	c.nextAsync++
	op := &asyncOp{
		c: c, id: c.nextAsync, h: r.h, sess: r.sess, tree: r.tree, encrypted: r.encrypted,
		signed:   r.sess != nil && r.sess.signer != nil && (r.h.Flags&wire.FlagSigned != 0 || r.sess.signRequired),
		sent:     make(chan struct{}),
		onCancel: onCancel,
	}
	c.pending[op.id] = op
	c.work.Add(1)
	r.async = op
	return op, wire.StatusPending
}

// cancel asks the operation to end with STATUS_CANCELLED.
func (op *asyncOp) cancel() { op.onCancel() }

// complete sends the final response, once: status, and the body body
// appends (nil for an error body).
func (op *asyncOp) complete(status uint32, body func([]byte) []byte) {
	op.once.Do(func() {
		c := op.c
		defer c.work.Done()
		c.mu.Lock()
		delete(c.pending, op.id)
		c.mu.Unlock()
		<-op.sent
		out := c.srv.getBuf(smallBuf)[:headroom]
		hdr := len(out)
		out = append(out, make([]byte, wire.HeaderSize)...)
		if body != nil {
			out = body(out)
		}
		if len(out) == hdr+wire.HeaderSize {
			out = appendErrorBody(out, nil)
		}
		h := wire.Header{
			CreditCharge: op.h.CreditCharge,
			Status:       status,
			Command:      op.h.Command,
			Flags:        wire.FlagResponse | wire.FlagAsync,
			MessageID:    op.h.MessageID,
			AsyncID:      op.id,
		}
		if op.sess != nil {
			h.SessionID = op.sess.id
		}
		h.Put(out[hdr:])
		m := outMsg{start: hdr, end: len(out)}
		var enc *session
		if op.encrypted {
			enc = op.sess
		} else if op.signed {
			m.signer = op.sess.signer
		}
		c.send(&out, []outMsg{m}, enc)
		c.srv.putBuf(out)
	})
}

// cancel handles a CANCEL: the operation it names, by async id or by
// message id, is cancelled. A CANCEL gets no response of its own.
func (c *conn) cancel(h wire.Header) {
	c.mu.Lock()
	var op *asyncOp
	if h.Flags&wire.FlagAsync != 0 {
		op = c.pending[h.AsyncID]
	} else {
		for _, p := range c.pending {
			if p.h.MessageID == h.MessageID {
				op = p
				break
			}
		}
	}
	c.mu.Unlock()
	if op != nil && (op.sess == nil || op.sess.id == h.SessionID) {
		op.cancel()
	}
}

// detach is a copy of r to answer alone, later: its message outlives r's
// buffer, which is reused once r has been answered.
func (r *request) detach() *request {
	msg := append([]byte(nil), r.msg...)
	return &request{c: r.c, h: r.h, msg: msg, body: msg[wire.HeaderSize:], sess: r.sess, tree: r.tree, encrypted: r.encrypted,
		chain: &chainState{first: true, last: true}, out: make([]byte, wire.HeaderSize)}
}

// answerAfterBreaks makes r wait for the breaks of oplocks and leases:
// once wait is closed, next says what to wait for then, until it says
// nothing, and then finish handles r2, r's detached copy, whose response
// completes r. A cancel ends the wait with STATUS_CANCELLED. It returns
// the status to answer r with now: pending, or why r cannot wait.
func (c *conn) answerAfterBreaks(r *request, wait <-chan struct{}, next func() <-chan struct{}, r2 *request, finish func() uint32) uint32 {
	cancelled := make(chan struct{})
	var once sync.Once
	op, status := c.goAsync(r, func() { once.Do(func() { close(cancelled) }) })
	if op == nil {
		return status
	}
	go func() {
		for wait != nil {
			select {
			case <-wait:
			case <-cancelled:
				op.complete(wire.StatusCancelled, nil)
				return
			}
			wait = next()
		}
		status := finish()
		var body func([]byte) []byte
		if status == wire.StatusSuccess {
			body = func(b []byte) []byte { return append(b, r2.out[wire.HeaderSize:]...) }
		}
		op.complete(status, body)
	}()
	return wire.StatusPending
}
