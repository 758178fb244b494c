//go:build linux

package smb

import (
	"bytes"
	"crypto/rand"
	"crypto/sha512"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"plug/smb/internal/seal"
	"plug/smb/internal/sign"
	"plug/smb/internal/wire"
	"plug/smb/ntlm"
)

// Capabilities and security modes of NEGOTIATE.
const (
	capLeasing    uint32 = 0x02
	capLargeMTU   uint32 = 0x04
	capEncryption uint32 = 0x40

	secSigningEnabled  uint16 = 0x01
	secSigningRequired uint16 = 0x02
)

// Negotiate context types.
const (
	ctxPreauth    uint16 = 1
	ctxEncryption uint16 = 2
	ctxSigning    uint16 = 8
	hashSHA512    uint16 = 1
)

// dialects are the ones served, the most preferred first.
var dialects = []uint16{wire.Dialect311, wire.Dialect302, wire.Dialect300, wire.Dialect210, wire.Dialect202}

// negotiate answers an SMB2 NEGOTIATE.
func (c *conn) negotiate(r *request) (uint32, error) {
	if c.negotiated {
		return 0, closeConn("a second NEGOTIATE")
	}
	b := r.body
	if len(b) < 36 || binary.LittleEndian.Uint16(b) != 36 {
		return wire.StatusInvalidParameter, nil
	}
	n := int(binary.LittleEndian.Uint16(b[2:]))
	if n == 0 || len(b) < 36+2*n {
		return wire.StatusInvalidParameter, nil
	}
	offered := make([]uint16, n)
	for i := range offered {
		offered[i] = binary.LittleEndian.Uint16(b[36+2*i:])
	}
	dialect := uint16(0)
	for _, d := range dialects {
		if slices.Contains(offered, d) {
			dialect = d
			break
		}
	}
	if dialect == 0 {
		return wire.StatusNotSupported, nil
	}
	c.clientSecMode = binary.LittleEndian.Uint16(b[4:])
	c.clientCaps = binary.LittleEndian.Uint32(b[8:])
	copy(c.clientGUID[:], b[12:28])
	c.clientDialects = offered
	c.signAlg = sign.AESCMAC
	if dialect < wire.Dialect300 {
		c.signAlg = sign.HMACSHA256
	}
	var ctxs []byte
	if dialect == wire.Dialect311 {
		off := binary.LittleEndian.Uint32(b[28:])
		count := int(binary.LittleEndian.Uint16(b[32:]))
		var status uint32
		if ctxs, status = c.negotiateContexts(r.msg, off, count); status != wire.StatusSuccess {
			return status, nil
		}
	} else if dialect >= wire.Dialect300 && c.clientCaps&capEncryption != 0 {
		c.cipher = seal.AES128CCM
	}
	c.dialect = dialect
	c.negotiated = true
	c.serverSecMode = secSigningEnabled
	if !c.srv.cfg.AllowUnsigned {
		c.serverSecMode |= secSigningRequired
	}
	if dialect >= wire.Dialect210 {
		c.serverCaps |= capLargeMTU | capLeasing
	}
	if dialect == wire.Dialect300 || dialect == wire.Dialect302 {
		if c.cipher != 0 {
			c.serverCaps |= capEncryption
		}
	}
	c.appendNegotiateResponse(r, dialect, ctxs)
	if dialect == wire.Dialect311 {
		c.preauth = preauthHash(c.preauth, r.msg)
		r.after = func(msg []byte) { c.preauth = preauthHash(c.preauth, msg) }
	}
	return wire.StatusSuccess, nil
}

// dialectName is the dialect as people write it: 2.0.2, 2.1, 3.0, 3.0.2, 3.1.1.
func dialectName(d uint16) string {
	s := fmt.Sprintf("%d.%d", d>>8, d>>4&0xF)
	if d&0xF != 0 {
		s += fmt.Sprintf(".%d", d&0xF)
	}
	return s
}

// preauthHash chains msg into the 3.1.1 preauthentication hash h.
func preauthHash(h [64]byte, msg []byte) [64]byte {
	d := sha512.New()
	d.Write(h[:])
	d.Write(msg)
	var out [64]byte
	d.Sum(out[:0])
	return out
}

// maxSize is the largest read, write or transaction of the dialect.
func (c *conn) maxSize() uint32 {
	if c.dialect == wire.Dialect202 {
		return 64 << 10
	}
	return MaxIOSize
}

// appendNegotiateResponse appends the NEGOTIATE response body for dialect
// (DialectWildcard for the answer to an SMB1 NEGOTIATE) with the 3.1.1
// negotiate contexts ctxs (already encoded, count in the first byte pair).
func (c *conn) appendNegotiateResponse(r *request, dialect uint16, ctxs []byte) {
	le := binary.LittleEndian
	b := r.out
	b = le.AppendUint16(b, 65)
	b = le.AppendUint16(b, c.serverSecMode|secSigningEnabled)
	b = le.AppendUint16(b, dialect)
	count := 0
	if len(ctxs) > 0 {
		count = int(le.Uint16(ctxs))
		ctxs = ctxs[2:]
	}
	b = le.AppendUint16(b, uint16(count))
	b = append(b, c.srv.guid[:]...)
	b = le.AppendUint32(b, c.serverCaps)
	max := c.maxSize()
	b = le.AppendUint32(b, max)
	b = le.AppendUint32(b, max)
	b = le.AppendUint32(b, max)
	b = le.AppendUint64(b, wire.Filetime(time.Now()))
	b = le.AppendUint64(b, 0)
	tok := ntlm.InitToken()
	b = le.AppendUint16(b, uint16(wire.HeaderSize+64))
	b = le.AppendUint16(b, uint16(len(tok)))
	ctxOffAt := len(b)
	b = le.AppendUint32(b, 0)
	b = append(b, tok...)
	if count > 0 {
		for (len(b)-r.hdr)%8 != 0 {
			b = append(b, 0)
		}
		le.PutUint32(b[ctxOffAt:], uint32(len(b)-r.hdr))
		b = append(b, ctxs...)
	}
	r.out = b
}

// negotiateContexts reads the client's 3.1.1 negotiate contexts from msg
// and returns the server's answers (a count, then the contexts).
func (c *conn) negotiateContexts(msg []byte, off uint32, count int) ([]byte, uint32) {
	seen := map[uint16]bool{} // the contexts read: each may come once
	var ciphers, algs []uint16
	at := int(off)
	for i := 0; i < count; i++ {
		if at < wire.HeaderSize+36 || at+8 > len(msg) {
			return nil, wire.StatusInvalidParameter
		}
		typ := binary.LittleEndian.Uint16(msg[at:])
		n := int(binary.LittleEndian.Uint16(msg[at+2:]))
		if at+8+n > len(msg) {
			return nil, wire.StatusInvalidParameter
		}
		data := msg[at+8 : at+8+n]
		switch typ {
		case ctxPreauth, ctxEncryption, ctxSigning:
			if seen[typ] {
				return nil, wire.StatusInvalidParameter
			}
			seen[typ] = true
		}
		ok := true
		switch typ {
		case ctxPreauth:
			if len(data) < 4 {
				return nil, wire.StatusInvalidParameter
			}
			ids, listed := idList(data, 4)
			if !listed || int(binary.LittleEndian.Uint16(data[2:]))+4+2*len(ids) > len(data) {
				return nil, wire.StatusInvalidParameter
			}
			if !slices.Contains(ids, hashSHA512) {
				return nil, wire.StatusSMBNoPreauthIntegrityHashOverlap
			}
		case ctxEncryption:
			ciphers, ok = idList(data, 2)
		case ctxSigning:
			algs, ok = idList(data, 2)
		}
		if !ok {
			return nil, wire.StatusInvalidParameter
		}
		at = wire.Align8(at + 8 + n)
	}
	if !seen[ctxPreauth] {
		return nil, wire.StatusInvalidParameter
	}
	le := binary.LittleEndian
	out := le.AppendUint16(nil, 1)
	var salt [32]byte
	rand.Read(salt[:])
	pre := le.AppendUint16(nil, 1)
	pre = le.AppendUint16(pre, uint16(len(salt)))
	pre = le.AppendUint16(pre, hashSHA512)
	pre = append(pre, salt[:]...)
	out = appendContext(out, ctxPreauth, pre)
	if seen[ctxEncryption] {
		for _, want := range []uint16{seal.AES128GCM, seal.AES128CCM, seal.AES256GCM, seal.AES256CCM} {
			if slices.Contains(ciphers, want) {
				c.cipher = want
				break
			}
		}
		out = appendContext(out, ctxEncryption, le.AppendUint16(le.AppendUint16(nil, 1), c.cipher))
		le.PutUint16(out, le.Uint16(out)+1)
	}
	if seen[ctxSigning] {
		for _, want := range []uint16{sign.AESGMAC, sign.AESCMAC, sign.HMACSHA256} {
			if slices.Contains(algs, want) {
				c.signAlg = want
				break
			}
		}
		out = appendContext(out, ctxSigning, le.AppendUint16(le.AppendUint16(nil, 1), c.signAlg))
		le.PutUint16(out, le.Uint16(out)+1)
	}
	return out, wire.StatusSuccess
}

// idList reads a count of 16-bit ids and the ids after it; the list
// starts after skip bytes (the count is in the first two).
func idList(data []byte, skip int) ([]uint16, bool) {
	if len(data) < skip {
		return nil, false
	}
	n := int(binary.LittleEndian.Uint16(data))
	if n == 0 || skip+2*n > len(data) {
		return nil, false
	}
	ids := make([]uint16, n)
	for i := range ids {
		ids[i] = binary.LittleEndian.Uint16(data[skip+2*i:])
	}
	return ids, true
}

// appendContext appends a negotiate context to out (after the count and
// earlier contexts), padded so that the next starts 8-aligned.
func appendContext(out []byte, typ uint16, data []byte) []byte {
	// Contexts after the first start 8-aligned; the first follows the
	// count, which is not part of the message.
	if body := len(out) - 2; body%8 != 0 {
		out = append(out, make([]byte, 8-body%8)...)
	}
	out = binary.LittleEndian.AppendUint16(out, typ)
	out = binary.LittleEndian.AppendUint16(out, uint16(len(data)))
	out = append(out, 0, 0, 0, 0)
	return append(out, data...)
}

// negotiateSMB1 answers an SMB1 NEGOTIATE that offers SMB2: with the
// wildcard dialect, so that the client sends an SMB2 NEGOTIATE next, or
// with 2.0.2 when that is all it offers.
func (c *conn) negotiateSMB1(msg []byte) error {
	if len(msg) < 35 || msg[4] != 0x72 {
		return closeConn("an SMB1 message other than NEGOTIATE")
	}
	n := int(binary.LittleEndian.Uint16(msg[33:]))
	if 35+n > len(msg) {
		return closeConn("a malformed SMB1 NEGOTIATE")
	}
	var wildcard, smb2 bool
	for _, d := range bytes.Split(msg[35:35+n], []byte{0}) {
		switch string(bytes.TrimPrefix(d, []byte{2})) {
		case "SMB 2.???":
			wildcard = true
		case "SMB 2.002":
			smb2 = true
		}
	}
	if !wildcard && !smb2 {
		return closeConn("an SMB1 NEGOTIATE that does not offer SMB2")
	}
	if !c.credits.take(0, 1) {
		return closeConn("an SMB1 NEGOTIATE after other messages")
	}
	dialect := wire.DialectWildcard
	if !wildcard {
		dialect = wire.Dialect202
		c.dialect, c.negotiated, c.signAlg = dialect, true, sign.HMACSHA256
	}
	c.serverSecMode = secSigningEnabled
	if !c.srv.cfg.AllowUnsigned {
		c.serverSecMode |= secSigningRequired
	}
	r := &request{c: c, h: wire.Header{Command: wire.Negotiate}, chain: &chainState{}}
	r.out = append(c.srv.getBuf(smallBuf)[:headroom], make([]byte, wire.HeaderSize)...)
	r.hdr = headroom
	c.appendNegotiateResponse(r, dialect, nil)
	signer := c.finish(r, wire.StatusSuccess)
	out := r.out
	defer c.srv.putBuf(out)
	return c.send(&out, []outMsg{{start: r.hdr, end: len(out), signer: signer}}, nil)
}
