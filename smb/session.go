//go:build linux

package smb

import (
	"encoding/binary"
	"errors"
	"maps"
	"slices"
	"time"

	"plug/smb/internal/seal"
	"plug/smb/internal/sign"
	"plug/smb/internal/wire"
	"plug/smb/ntlm"
)

const (
	sessionInProgress = iota
	sessionValid
	sessionGone
)

const sessionFlagEncrypt uint16 = 0x0004

// session is an authenticated user on a connection. Its fields other
// than state, trees and nextTree are set once, when it becomes valid;
// state and the trees are guarded by conn.mu.
type session struct {
	conn    *conn
	id      uint64
	state   int
	auth    *ntlm.Acceptor
	preauth [64]byte
	user    string

	signer       *sign.Signer
	sealer       *seal.Sealer
	signRequired bool
	encrypt      bool

	trees    map[uint32]*tree
	nextTree uint32
}

func (s *session) valid() bool {
	s.conn.mu.Lock()
	defer s.conn.mu.Unlock()
	return s.state == sessionValid
}

// sessionSetup runs one leg of an authentication.
func (c *conn) sessionSetup(r *request) uint32 {
	b := r.body
	if b[2]&0x01 != 0 {
		// Binding another connection to a session: no multichannel. The
		// session's key signs the refusal, as the client expects.
		c.srv.mu.Lock()
		if s := c.srv.sessions[r.h.SessionID]; s != nil {
			r.sign = s.signer
		}
		c.srv.mu.Unlock()
		return wire.StatusRequestNotAccepted
	}
	secMode := uint16(b[3])
	tok, err := wire.Field(r.msg, uint32(binary.LittleEndian.Uint16(b[12:])), uint32(binary.LittleEndian.Uint16(b[14:])), wire.HeaderSize+24)
	if err != nil {
		return wire.StatusInvalidParameter
	}
	previous := binary.LittleEndian.Uint64(b[16:])

	var s *session
	if r.h.SessionID == 0 {
		c.mu.Lock()
		n := len(c.sessions)
		c.mu.Unlock()
		if n >= maxSessions {
			return wire.StatusInsufficientResources
		}
		s = &session{conn: c, id: c.srv.newSessionID(), preauth: c.preauth, trees: map[uint32]*tree{}}
		s.auth = ntlm.NewAcceptor(c.srv.creds)
		c.mu.Lock()
		c.sessions[s.id] = s
		c.mu.Unlock()
	} else {
		s = c.session(r.h.SessionID)
		if s == nil {
			return wire.StatusUserSessionDeleted
		}
		c.mu.Lock()
		state := s.state
		c.mu.Unlock()
		if state == sessionValid {
			// A reauthentication: it must be signed like any request.
			if r.h.Flags&wire.FlagSigned == 0 && s.signRequired || r.h.Flags&wire.FlagSigned != 0 && !s.signer.Verify(r.msg) {
				return wire.StatusAccessDenied
			}
			if s.auth == nil {
				s.auth = ntlm.NewAcceptor(c.srv.creds)
			}
		}
	}
	r.sess = s
	reauth := s.signer != nil
	if c.dialect == wire.Dialect311 && !reauth {
		s.preauth = preauthHash(s.preauth, r.msg)
	}
	out, done, err := s.auth.Step(tok)
	if err != nil {
		c.srv.logf("smb: logon refused for user %s from %s: %v", quote(s.auth.User()), c.nc.RemoteAddr(), refusal(err))
		s.auth = nil
		if reauth {
			// A failed reauthentication ends the session.
			c.logoff(s)
		} else {
			c.mu.Lock()
			delete(c.sessions, s.id)
			c.mu.Unlock()
		}
		if errors.Is(err, ntlm.ErrMalformed) {
			return wire.StatusInvalidParameter
		}
		return wire.StatusLogonFailure
	}
	le := binary.LittleEndian
	appendBody := func(flags uint16) {
		r.out = le.AppendUint16(r.out, 9)
		r.out = le.AppendUint16(r.out, flags)
		r.out = le.AppendUint16(r.out, uint16(wire.HeaderSize+8))
		r.out = le.AppendUint16(r.out, uint16(len(out)))
		r.out = append(r.out, out...)
		if len(out) == 0 {
			r.out = append(r.out, 0)
		}
	}
	if !done {
		appendBody(0)
		if c.dialect == wire.Dialect311 && !reauth {
			r.after = func(msg []byte) { s.preauth = preauthHash(s.preauth, msg) }
		}
		return wire.StatusMoreProcessingRequired
	}
	if reauth {
		s.auth = nil
		appendBody(0)
		return wire.StatusSuccess
	}
	c.mu.Lock()
	first := !c.authed
	c.mu.Unlock()
	if first {
		// The connection's first logon moves it among the logged-in ones,
		// which have no deadline.
		if !c.srv.logIn(c) {
			c.srv.logf("smb: logon of user %s from %s refused: %d connections are logged on already", quote(s.auth.User()), c.nc.RemoteAddr(), c.srv.cfg.MaxConns)
			s.auth = nil
			c.mu.Lock()
			delete(c.sessions, s.id)
			c.mu.Unlock()
			return wire.StatusRequestNotAccepted
		}
		c.mu.Lock()
		c.authed = true
		c.mu.Unlock()
		c.nc.SetReadDeadline(time.Time{})
	}
	if err := c.sessionKeys(s, s.auth.SessionKey(), secMode); err != nil {
		c.mu.Lock()
		delete(c.sessions, s.id)
		c.mu.Unlock()
		return wire.StatusInternalError
	}
	s.user = s.auth.User()
	signing := "signed"
	if !s.signRequired {
		signing = "signed on request"
	}
	c.srv.logf("smb: session for user %s (workstation %s) from %s, SMB %s, %s", quote(s.user), quote(s.auth.Workstation()), c.nc.RemoteAddr(), dialectName(c.dialect), signing)
	s.auth = nil
	c.mu.Lock()
	s.state = sessionValid
	c.mu.Unlock()
	c.srv.register(s, previous)
	var flags uint16
	if s.encrypt {
		flags |= sessionFlagEncrypt
	}
	appendBody(flags)
	if c.dialect >= wire.Dialect300 || s.signRequired {
		r.sign = s.signer
	}
	return wire.StatusSuccess
}

// refusal says why a logon was refused, for the log.
func refusal(err error) string {
	switch {
	case errors.Is(err, ntlm.ErrLogon):
		return "wrong user name or password"
	case errors.Is(err, ntlm.ErrRefused):
		return "anonymous, guest and NTLMv1 logons are not accepted"
	}
	return "malformed authentication message"
}

// sessionKeys derives the session's signing and encryption keys from the
// authentication's session key.
func (c *conn) sessionKeys(s *session, key []byte, clientSecMode uint16) error {
	if len(key) > 16 {
		key = key[:16]
	}
	k := make([]byte, 16)
	copy(k, key)
	var err error
	var signKey, in, out []byte
	bits := 128
	if c.cipher != 0 {
		bits = 8 * seal.KeySize(c.cipher)
	}
	switch c.dialect {
	case wire.Dialect202, wire.Dialect210:
		signKey = k
	case wire.Dialect300, wire.Dialect302:
		signKey = sign.Derive(k, []byte("SMB2AESCMAC\x00"), []byte("SmbSign\x00"), 128)
		in = sign.Derive(k, []byte("SMB2AESCCM\x00"), []byte("ServerIn \x00"), 128)
		out = sign.Derive(k, []byte("SMB2AESCCM\x00"), []byte("ServerOut\x00"), 128)
	default:
		signKey = sign.Derive(k, []byte("SMBSigningKey\x00"), s.preauth[:], 128)
		in = sign.Derive(k, []byte("SMBC2SCipherKey\x00"), s.preauth[:], bits)
		out = sign.Derive(k, []byte("SMBS2CCipherKey\x00"), s.preauth[:], bits)
	}
	if s.signer, err = sign.New(c.signAlg, signKey); err != nil {
		return err
	}
	if c.cipher != 0 {
		if s.sealer, err = seal.New(c.cipher, in, out); err != nil {
			return err
		}
	}
	s.signRequired = !c.srv.cfg.AllowUnsigned || clientSecMode&secSigningRequired != 0 || c.clientSecMode&secSigningRequired != 0
	return nil
}

// logoffRequest answers LOGOFF.
func (c *conn) logoffRequest(r *request) uint32 {
	return bareExchange(r, func() { c.logoff(r.sess) })
}

// logoff ends a session: its trees and their open files, but for the
// durable ones, which are parked: Windows keeps them across a LOGOFF, a
// lost connection and a session replaced by a reconnect.
func (c *conn) logoff(s *session) {
	c.mu.Lock()
	if s.state == sessionGone {
		c.mu.Unlock()
		return
	}
	s.state = sessionGone
	delete(c.sessions, s.id)
	trees := slices.Collect(maps.Values(s.trees))
	c.mu.Unlock()
	for _, t := range trees {
		c.disconnectTree(t, true)
	}
	c.srv.unregister(s)
}

// expireSession logs off s because its client came back on another
// connection and named it as its previous session.
func (c *conn) expireSession(s *session) { c.logoff(s) }
