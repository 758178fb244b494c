//go:build linux

package smb

import (
	"encoding/binary"

	"plug/smb/internal/sign"
	"plug/smb/internal/wire"
)

// chainState is what related requests of a compound inherit.
type chainState struct {
	sess *session
	tree *tree
	// file is the open the request at hand resolved or created; prevFile
	// the one of the request before, which related requests use.
	file, prevFile *open
	fileID         [16]byte
	status         uint32 // the previous request's
	first          bool
	last           bool // the request at hand ends the chain
	compound       bool // the chain has more than one request
}

// outMsg is one response of a chain, to be signed once the chain is laid out.
type outMsg struct {
	start, end int
	signer     *sign.Signer
	after      func(msg []byte)
}

// chain answers a message or a compound chain.
//
// The responses of a chain are laid out in one buffer and go as one
// compound response, as long as they fit in a large buffer: before a
// request whose response could overflow it, the responses so far are sent
// as a compound of their own (MS-SMB2 3.3.4.1.3 lets a server compound
// responses or not). However long the chain, it holds one large buffer of
// responses at most.
func (c *conn) chain(frame []byte, enc *session, arrived int64) error {
	out := c.srv.getBuf(smallBuf)[:headroom]
	defer func() { c.srv.putBuf(out) }()
	var msgs []outMsg
	st := chainState{first: true}
	var asyncs []*asyncOp
	defer func() {
		// Their final responses wait for this chain, with the interim
		// ones, to be sent (or given up).
		for _, op := range asyncs {
			close(op.sent)
		}
	}()
	for off := 0; off < len(frame); {
		msg := frame[off:]
		h, err := wire.ParseHeader(msg)
		if err != nil {
			return closeConn("a malformed header in a compound chain")
		}
		if h.NextCommand != 0 {
			if h.NextCommand%8 != 0 || int(h.NextCommand) >= len(msg) || h.NextCommand < wire.HeaderSize {
				return closeConn("a compound chain with a bad next-command offset")
			}
			msg = msg[:h.NextCommand]
		}
		off += len(msg)
		if h.Flags&wire.FlagResponse != 0 {
			return closeConn("a response sent to the server")
		}
		if h.Command == wire.Cancel {
			c.cancel(h)
			continue
		}
		if !c.credits.take(h.MessageID, h.CreditCharge) {
			return closeConn("message id %d is outside the credit window", h.MessageID)
		}
		if err := c.makeRoom(&out, &msgs, responseBound(h.Command, msg[wire.HeaderSize:]), enc); err != nil {
			return err
		}
		r := &request{c: c, h: h, msg: msg, body: msg[wire.HeaderSize:], encrypted: enc != nil, arrived: arrived, chain: &st}
		st.prevFile, st.file = st.file, nil
		st.last = h.NextCommand == 0
		st.compound = st.compound || !st.last
		// Pad the previous response of the chain to 8 bytes.
		if len(msgs) > 0 {
			prev := &msgs[len(msgs)-1]
			for (len(out)-headroom)%8 != 0 {
				out = append(out, 0)
			}
			prev.end = len(out)
			binary.LittleEndian.PutUint32(out[prev.start+wire.OffNextCommand:], uint32(prev.end-prev.start))
		}
		r.hdr = len(out)
		r.out = append(out, make([]byte, wire.HeaderSize)...)
		signer, err := c.dispatch(r, enc)
		if err != nil {
			return err
		}
		out = r.out
		msgs = append(msgs, outMsg{start: r.hdr, end: len(out), signer: signer, after: r.after})
		if r.async != nil {
			asyncs = append(asyncs, r.async)
		}
		st.first = false
	}
	if len(msgs) == 0 {
		return nil
	}
	// The last response of a compound is padded to 8 bytes too, as
	// Windows pads it (a READ's data then ends on the boundary).
	if !st.first && st.compound {
		last := &msgs[len(msgs)-1]
		for (len(out)-headroom)%8 != 0 {
			out = append(out, 0)
		}
		last.end = len(out)
	}
	return c.send(&out, msgs, enc)
}

// makeRoom readies *out for one more response of at most body bytes after
// its header, with the padding before it and the room encryption needs
// after it: in a large buffer when the small one cannot hold it, after
// sending the responses *msgs laid out so far when the large one cannot.
func (c *conn) makeRoom(out *[]byte, msgs *[]outMsg, body int, enc *session) error {
	need := 8 + wire.HeaderSize + body + 16
	if len(*out)+need <= cap(*out) {
		return nil
	}
	if len(*msgs) > 0 && (cap(*out) == largeBuf || len(*out)+need > largeBuf) {
		if err := c.send(out, *msgs, enc); err != nil {
			return err
		}
		*msgs = (*msgs)[:0]
		*out = (*out)[:headroom]
	}
	if len(*out)+need > cap(*out) {
		large := append(c.srv.getBuf(largeBuf), *out...)
		c.srv.putBuf(*out)
		*out = large
	}
	return nil
}

// Bounds of the response bodies of responseBound.
const (
	smallResponse = 16 << 10 // what the commands without a payload answer
	readFixed     = 16       // a READ response's body before its data
	infoFixed     = 8        // that of QUERY_INFO, QUERY_DIRECTORY, CHANGE_NOTIFY
	ioctlFixed    = 48       // that of IOCTL
)

// responseBound is the largest response body the request of command cmd
// with body b can get: the payload it asks for (refused beyond MaxIOSize)
// and its fixed part, or smallResponse for the commands without a payload.
func responseBound(cmd uint16, b []byte) int {
	asked := func(at, fixed int) int {
		if len(b) < at+4 {
			return smallResponse
		}
		return fixed + int(min(binary.LittleEndian.Uint32(b[at:]), MaxIOSize))
	}
	switch cmd {
	case wire.Read:
		return asked(4, readFixed)
	case wire.QueryInfo, wire.ChangeNotify:
		return asked(4, infoFixed)
	case wire.QueryDirectory:
		return asked(28, infoFixed)
	case wire.Ioctl:
		return asked(44, ioctlFixed)
	}
	return smallResponse
}
