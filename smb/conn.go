//go:build linux

package smb

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	"plug/smb/internal/sign"
	"plug/smb/internal/wire"
)

// headroom is the space kept before a response's first SMB2 header: the
// transport header and, when it is encrypted, the transform header.
const headroom = wire.FrameHeaderSize + wire.TransformSize

// conn is one client connection.
type conn struct {
	srv *Server
	nc  net.Conn
	ar  *arrivalReader // nc, noting when what it reads arrived
	br  *bufio.Reader  // ar
	wmu sync.Mutex     // one response at a time on the wire

	// Set by NEGOTIATE, read-only afterwards.
	negotiated     bool
	dialect        uint16
	clientGUID     [16]byte
	clientCaps     uint32
	clientSecMode  uint16
	clientDialects []uint16
	serverCaps     uint32
	serverSecMode  uint16
	signAlg        uint16
	cipher         uint16 // 0: no encryption
	preauth        [64]byte

	// Guarded by srv.mu: where the connection stands in the server's
	// counts, and since when it is counted.
	phase int
	since time.Time

	credits credits
	ioSlots chan struct{}
	work    sync.WaitGroup // reads, writes and async operations under way

	mu        sync.Mutex
	sessions  map[uint64]*session
	opens     map[uint64]*open
	nextFile  uint64
	pending   map[uint64]*asyncOp
	nextAsync uint64
	authed    bool
	done      bool
}

func newConn(s *Server, nc net.Conn) *conn {
	ar := newArrivalReader(nc)
	c := &conn{
		srv:      s,
		nc:       nc,
		ar:       ar,
		br:       bufio.NewReaderSize(ar, 64<<10),
		ioSlots:  make(chan struct{}, maxIO),
		sessions: map[uint64]*session{},
		opens:    map[uint64]*open{},
		pending:  map[uint64]*asyncOp{},
	}
	c.credits.init()
	return c
}

// errClose is a request after which the connection cannot go on.
type errClose struct{ why string }

func (e *errClose) Error() string { return e.why }

func closeConn(format string, a ...any) error { return &errClose{fmt.Sprintf(format, a...)} }

func (c *conn) serve() {
	defer c.shutdown()
	c.nc.SetReadDeadline(time.Now().Add(handshakeTimeout))
	for {
		n, err := wire.FrameLen(c.br, maxFrame)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				c.srv.logf("smb: connection from %s closed: %v", c.nc.RemoteAddr(), err)
			}
			return
		}
		buf := c.srv.getBuf(n + 16)[:n]
		if _, err := io.ReadFull(c.br, buf); err != nil {
			c.srv.putBuf(buf)
			return
		}
		if err := c.frame(buf, c.ar.last); err != nil {
			var ec *errClose
			if errors.As(err, &ec) {
				c.srv.logf("smb: connection from %s closed: %s", c.nc.RemoteAddr(), ec.why)
			}
			return
		}
	}
}

// shutdown ends everything the connection holds.
func (c *conn) shutdown() {
	c.nc.Close()
	c.mu.Lock()
	c.done = true
	ops := slices.Collect(maps.Values(c.pending))
	c.mu.Unlock()
	for _, op := range ops {
		op.cancel()
	}
	c.work.Wait()
	c.mu.Lock()
	sessions := slices.Collect(maps.Values(c.sessions))
	c.mu.Unlock()
	for _, s := range sessions {
		c.logoff(s)
	}
}

// frame handles one transport frame, which arrived at arrived (Unix
// nanoseconds): a message, a compound chain, or an encrypted one of
// either. It owns buf and gives it back.
func (c *conn) frame(buf []byte, arrived int64) error {
	if len(buf) < 4 {
		c.srv.putBuf(buf)
		return closeConn("a message of %d bytes", len(buf))
	}
	var enc *session
	msg := buf
	switch [4]byte(buf[:4]) {
	case wire.TransformID:
		t, err := wire.ParseTransform(buf)
		if err != nil {
			c.srv.putBuf(buf)
			return closeConn("a malformed transform header")
		}
		enc = c.session(t.SessionID)
		if enc == nil || enc.sealer == nil {
			c.srv.putBuf(buf)
			return closeConn("an encrypted message for a session without encryption")
		}
		if msg, err = enc.sealer.Open(buf); err != nil {
			c.srv.putBuf(buf)
			return closeConn("an encrypted message that does not decrypt")
		}
	case wire.SMB1ID:
		defer c.srv.putBuf(buf)
		if c.negotiated {
			return closeConn("an SMB1 message after NEGOTIATE")
		}
		return c.negotiateSMB1(buf)
	case wire.ProtocolID:
	default:
		c.srv.putBuf(buf)
		return closeConn("not an SMB2 message")
	}
	h, err := wire.ParseHeader(msg)
	if err != nil {
		c.srv.putBuf(buf)
		return closeConn("a malformed header")
	}
	if h.NextCommand == 0 && (h.Command == wire.Read || h.Command == wire.Write) && c.negotiated {
		return c.ioRequest(h, msg, buf, enc)
	}
	defer c.srv.putBuf(buf)
	return c.chain(msg, enc, arrived)
}

// request is one message being answered.
type request struct {
	c    *conn
	h    wire.Header
	msg  []byte // header and body, padding included
	body []byte // msg after the header
	sess *session
	tree *tree
	// encrypted: the message came encrypted, so its answer goes so too.
	encrypted bool
	// arrived is when the message had arrived whole, in Unix nanoseconds
	// (see arrivalReader).
	arrived int64
	// out is the response being built: its header is at hdr, the handler
	// appends the body.
	out []byte
	hdr int
	// sign overrides the signer of the response (the final SESSION_SETUP).
	sign *sign.Signer
	// after is called with the response as sent, before it is signed (the
	// preauthentication hash of 3.1.1).
	after func(msg []byte)
	// async is set when the handler answers later.
	async *asyncOp
	// related compound state: the file of the previous request.
	chain *chainState
}

// dispatch runs one request and fills in its response header; it returns
// the signer the response is to be signed with, if any.
func (c *conn) dispatch(r *request, enc *session) (*sign.Signer, error) {
	status, err := c.prepare(r, enc)
	if err != nil {
		return nil, err
	}
	if status == wire.StatusSuccess {
		status, err = c.run(r)
		if err != nil {
			return nil, err
		}
	}
	return c.finish(r, status), nil
}

// prepare checks a request's credit charge, session, tree and signature.
func (c *conn) prepare(r *request, enc *session) (uint32, error) {
	h := &r.h
	st := r.chain
	related := h.Flags&wire.FlagRelated != 0
	if !c.negotiated && h.Command != wire.Negotiate {
		return 0, closeConn("command %#x before NEGOTIATE", h.Command)
	}
	needSession := h.Command != wire.Negotiate && h.Command != wire.SessionSetup && !(h.Command == wire.Echo && h.SessionID == 0)
	switch {
	case related && st.first:
		// The first request of a chain has nothing to be related to; its
		// session still signs the answer.
		r.sess = c.session(h.SessionID)
		return wire.StatusInvalidParameter, nil
	case related:
		r.sess, r.tree = st.sess, st.tree
		if r.sess == nil {
			return wire.StatusInvalidParameter, nil
		}
	case needSession:
		r.sess = c.session(h.SessionID)
		if r.sess == nil {
			return wire.StatusUserSessionDeleted, nil
		}
	}
	if r.sess != nil && !r.sess.valid() {
		s := r.sess
		r.sess = nil
		if needSession {
			return wire.StatusUserSessionDeleted, nil
		}
		r.sess = s
	}
	if enc != nil && r.sess != nil && r.sess != enc {
		return wire.StatusAccessDenied, nil
	}
	if r.sess != nil && enc == nil && needSession {
		if h.Flags&wire.FlagSigned != 0 {
			if r.sess.signer == nil || !r.sess.signer.Verify(r.msg) {
				return wire.StatusAccessDenied, nil
			}
		} else if r.sess.signRequired {
			return wire.StatusAccessDenied, nil
		}
		if r.sess.encrypt {
			return wire.StatusAccessDenied, nil
		}
	}
	switch h.Command {
	case wire.Negotiate, wire.SessionSetup, wire.Logoff, wire.TreeConnect, wire.Echo:
		return wire.StatusSuccess, nil
	}
	if !related {
		r.tree = r.sess.tree(h.TreeID)
	} else if r.tree == nil {
		return wire.StatusInvalidParameter, nil
	}
	if r.tree == nil {
		return wire.StatusNetworkNameDeleted, nil
	}
	if r.tree.encrypt && enc == nil {
		return wire.StatusAccessDenied, nil
	}
	return wire.StatusSuccess, nil
}

// requestSizes are the StructureSize that the body of a command's request
// begins with, for the handlers that leave checking it to run. An odd size
// counts one byte of a variable part that may be absent, so a body holds at
// least size rounded down to even. (An OPLOCK_BREAK acknowledgment has
// one of two sizes: oplockAck checks it.)
var requestSizes = map[uint16]uint16{
	wire.SessionSetup:   25,
	wire.Lock:           48,
	wire.Ioctl:          57,
	wire.QueryDirectory: 33,
	wire.ChangeNotify:   32,
	wire.QueryInfo:      41,
	wire.SetInfo:        33,
}

// run calls the command's handler, once its body has the StructureSize
// requestSizes gives.
func (c *conn) run(r *request) (uint32, error) {
	if size, ok := requestSizes[r.h.Command]; ok && (len(r.body) < int(size&^1) || binary.LittleEndian.Uint16(r.body) != size) {
		return wire.StatusInvalidParameter, nil
	}
	switch r.h.Command {
	case wire.Negotiate:
		return c.negotiate(r)
	case wire.SessionSetup:
		return c.sessionSetup(r), nil
	case wire.Logoff:
		return c.logoffRequest(r), nil
	case wire.TreeConnect:
		return c.treeConnect(r), nil
	case wire.TreeDisconnect:
		return c.treeDisconnect(r), nil
	case wire.Create:
		return c.create(r), nil
	case wire.Close:
		return c.closeRequest(r), nil
	case wire.Flush:
		return c.flush(r), nil
	case wire.Read:
		return c.read(r), nil
	case wire.Write:
		return c.write(r), nil
	case wire.Lock:
		return c.lock(r), nil
	case wire.Ioctl:
		return c.ioctl(r)
	case wire.Echo:
		return bareExchange(r, func() {}), nil
	case wire.QueryDirectory:
		return c.queryDirectory(r), nil
	case wire.ChangeNotify:
		return c.changeNotify(r), nil
	case wire.QueryInfo:
		return c.queryInfo(r), nil
	case wire.SetInfo:
		return c.setInfo(r), nil
	case wire.OplockBreak:
		return c.oplockAck(r), nil
	}
	return wire.StatusInvalidParameter, nil
}

// bareExchange answers a request whose body, like its answer's, is a bare
// StructureSize of 4 (ECHO, LOGOFF, TREE_DISCONNECT), once do has run.
func bareExchange(r *request, do func()) uint32 {
	if len(r.body) < 4 {
		return wire.StatusInvalidParameter
	}
	do()
	r.out = binary.LittleEndian.AppendUint32(r.out, 4)
	return wire.StatusSuccess
}

// finish fills in the response header of r and returns its signer.
func (c *conn) finish(r *request, status uint32) *sign.Signer {
	st := r.chain
	if len(r.out) == r.hdr+wire.HeaderSize && status != wire.StatusSuccess {
		r.out = appendErrorBody(r.out, nil)
	}
	rh := wire.Header{
		CreditCharge: r.h.CreditCharge,
		Status:       status,
		Command:      r.h.Command,
		Flags:        wire.FlagResponse | r.h.Flags&(wire.FlagRelated|wire.FlagPriority),
		MessageID:    r.h.MessageID,
		TreeID:       r.h.TreeID,
		SessionID:    r.h.SessionID,
	}
	if r.sess != nil {
		rh.SessionID = r.sess.id
	}
	if r.tree != nil {
		rh.TreeID = r.tree.id
	}
	rh.Credits = c.credits.grant(r.h.Credits)
	var signer *sign.Signer
	if r.async != nil {
		rh.Flags |= wire.FlagAsync
		rh.AsyncID = r.async.id
	} else if !r.encrypted {
		signer = r.sign
		if signer == nil && r.sess != nil && r.sess.signer != nil && (r.h.Flags&wire.FlagSigned != 0 || r.sess.signRequired) {
			signer = r.sess.signer
		}
		if signer == nil && r.h.Flags&wire.FlagSigned != 0 {
			// An error found before the session's key was at hand (no
			// such session, a chain gone wrong): flagged, with a zero
			// signature, as Windows and Samba answer.
			rh.Flags |= wire.FlagSigned
		}
	}
	rh.Put(r.out[r.hdr:])
	st.status = status
	st.sess, st.tree = r.sess, r.tree
	return signer
}

// appendErrorBody appends the body of an error response with data.
func appendErrorBody(b, data []byte) []byte {
	b = binary.LittleEndian.AppendUint16(b, 9)
	b = append(b, 0, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(data)))
	if len(data) == 0 {
		return append(b, 0)
	}
	return append(b, data...)
}

// send signs the responses laid out in *out and writes them, encrypted
// for enc when it is set. It may grow *out.
func (c *conn) send(out *[]byte, msgs []outMsg, enc *session) error {
	b := *out
	for _, m := range msgs {
		if m.after != nil {
			m.after(b[m.start:m.end])
		}
		if m.signer != nil {
			m.signer.Sign(b[m.start:m.end])
		}
	}
	var frame []byte
	if enc != nil && enc.sealer != nil {
		if cap(b)-len(b) < 16 {
			b = append(b, make([]byte, 16)...)[:len(b)]
			*out = b
		}
		enc.sealer.Seal(b[wire.FrameHeaderSize:], enc.id)
		frame = b
		wire.PutFrameHeader(frame, len(frame)-wire.FrameHeaderSize)
	} else {
		frame = b[headroom-wire.FrameHeaderSize:]
		wire.PutFrameHeader(frame, len(frame)-wire.FrameHeaderSize)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := c.nc.Write(frame); err != nil {
		// A response cut short leaves the stream unusable, and a client
		// that does not take its responses for writeTimeout holds buffers
		// other clients need: the connection ends.
		c.nc.Close()
		return err
	}
	return nil
}

// ioRequest runs a READ or WRITE that came alone in its frame on a
// goroutine of its own, so that the disk and the network overlap. It owns
// buf.
func (c *conn) ioRequest(h wire.Header, msg, buf []byte, enc *session) error {
	if h.Flags&wire.FlagResponse != 0 {
		c.srv.putBuf(buf)
		return closeConn("a response sent to the server")
	}
	if !c.credits.take(h.MessageID, h.CreditCharge) {
		c.srv.putBuf(buf)
		return closeConn("message id %d is outside the credit window", h.MessageID)
	}
	st := &chainState{first: true, last: true}
	r := &request{c: c, h: h, msg: msg, body: msg[wire.HeaderSize:], encrypted: enc != nil, chain: st}
	status, err := c.prepare(r, enc)
	if err != nil {
		c.srv.putBuf(buf)
		return err
	}
	var o *open
	if status == wire.StatusSuccess {
		o, status = c.ioFile(r)
	}
	size := smallBuf
	if h.Command == wire.Read && status == wire.StatusSuccess {
		size = largeBuf
	}
	// The connection is not read while it waits for its turn and its
	// response's buffer.
	c.ioSlots <- struct{}{}
	out := c.srv.getBuf(size)[:headroom]
	c.work.Add(1)
	go func() {
		defer c.work.Done()
		defer func() { <-c.ioSlots }()
		defer c.srv.putBuf(buf)
		r.hdr = len(out)
		r.out = append(out, make([]byte, wire.HeaderSize)...)
		if o != nil {
			defer o.io.RUnlock()
			if h.Command == wire.Read {
				status = c.readFile(r, o)
			} else {
				status = c.writeFile(r, o)
			}
		}
		signer := c.finish(r, status)
		out = r.out
		c.send(&out, []outMsg{{start: r.hdr, end: len(out), signer: signer}}, enc)
		c.srv.putBuf(out)
	}()
	return nil
}

// session is the connection's session id, or nil.
func (c *conn) session(id uint64) *session {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sessions[id]
}
