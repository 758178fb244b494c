package ntlm

import (
	"bytes"
	encasn1 "encoding/asn1"

	"golang.org/x/crypto/cryptobyte"
	"golang.org/x/crypto/cryptobyte/asn1"
)

var (
	oidSPNEGO = encasn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 2}
	oidNTLM   = encasn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 311, 2, 2, 10}
)

// ASN.1 tags of SPNEGO: [APPLICATION 0] around the initial token, and
// the context-specific constructed tags [0] to [3].
const (
	tagApplication0 = asn1.Tag(0x60)
	ctx0            = asn1.Tag(0xA0)
	ctx1            = asn1.Tag(0xA1)
	ctx2            = asn1.Tag(0xA2)
	ctx3            = asn1.Tag(0xA3)
	negTokenInit    = ctx0
	negTokenResp    = ctx1
)

// negState values.
const (
	acceptCompleted  = 0
	acceptIncomplete = 1
)

// InitToken is the SPNEGO token a server offers in its NEGOTIATE response:
// the mechanisms it accepts, NTLM only.
func InitToken() []byte {
	var b cryptobyte.Builder
	b.AddASN1(tagApplication0, func(b *cryptobyte.Builder) {
		b.AddASN1ObjectIdentifier(oidSPNEGO)
		b.AddASN1(negTokenInit, func(b *cryptobyte.Builder) {
			b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
				b.AddASN1(ctx0, func(b *cryptobyte.Builder) {
					b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
						b.AddASN1ObjectIdentifier(oidNTLM)
					})
				})
			})
		})
	})
	return b.BytesOrPanic()
}

// Acceptor is the server side of one authentication: feed it each token
// the client sends with Step until it says done.
type Acceptor struct {
	ntlm      server
	step      int
	spnego    bool
	mechTypes []byte // the client's mechTypes element, for mechListMIC
	done      bool
}

// NewAcceptor starts an authentication against creds.
func NewAcceptor(creds *Credentials) *Acceptor {
	return &Acceptor{ntlm: server{creds: creds}}
}

// Step takes the client's next token and returns the token to answer
// with. done is true once the client is authenticated; an error ends the
// authentication: ErrLogon, ErrRefused or ErrMalformed.
func (a *Acceptor) Step(in []byte) (out []byte, done bool, err error) {
	if a.done || a.step > 1 {
		return nil, false, ErrMalformed
	}
	a.step++
	if a.step == 1 {
		return a.first(in)
	}
	return a.second(in)
}

func (a *Acceptor) first(in []byte) ([]byte, bool, error) {
	if bytes.HasPrefix(in, signature) {
		out, err := a.ntlm.challengeFor(in)
		return out, false, err
	}
	a.spnego = true
	s := cryptobyte.String(in)
	var app, init, seq cryptobyte.String
	var oid encasn1.ObjectIdentifier
	if !s.ReadASN1(&app, tagApplication0) || !app.ReadASN1ObjectIdentifier(&oid) || !oid.Equal(oidSPNEGO) ||
		!app.ReadASN1(&init, negTokenInit) || !init.ReadASN1(&seq, asn1.SEQUENCE) {
		return nil, false, ErrMalformed
	}
	var mechs, mechList, tok cryptobyte.String
	var hasToken bool
	if !seq.ReadASN1(&mechs, ctx0) || !mechs.ReadASN1Element(&mechList, asn1.SEQUENCE) {
		return nil, false, ErrMalformed
	}
	a.mechTypes = append([]byte(nil), mechList...)
	if !seq.SkipOptionalASN1(ctx1) ||
		!seq.ReadOptionalASN1(&tok, &hasToken, ctx2) {
		return nil, false, ErrMalformed
	}
	var list cryptobyte.String
	mechList.ReadASN1(&list, asn1.SEQUENCE)
	first, ntlmOffered := true, false
	ntlmFirst := false
	for !list.Empty() {
		var m encasn1.ObjectIdentifier
		if !list.ReadASN1ObjectIdentifier(&m) {
			return nil, false, ErrMalformed
		}
		if m.Equal(oidNTLM) {
			ntlmOffered, ntlmFirst = true, first
		}
		first = false
	}
	if !ntlmOffered {
		return nil, false, ErrRefused
	}
	var ntlmTok []byte
	if hasToken && ntlmFirst {
		if !tok.ReadASN1Bytes(&ntlmTok, asn1.OCTET_STRING) {
			return nil, false, ErrMalformed
		}
	}
	if ntlmTok == nil {
		// The client's optimistic token is for another mechanism: name
		// NTLM and let it start over.
		a.step = 0
		return respToken(acceptIncomplete, true, nil, nil), false, nil
	}
	chal, err := a.ntlm.challengeFor(ntlmTok)
	if err != nil {
		return nil, false, err
	}
	return respToken(acceptIncomplete, true, chal, nil), false, nil
}

func (a *Acceptor) second(in []byte) ([]byte, bool, error) {
	if !a.spnego {
		if err := a.ntlm.authenticate(in); err != nil {
			return nil, false, err
		}
		a.done = true
		return nil, true, nil
	}
	tok, mic, err := parseResp(in)
	if err != nil {
		return nil, false, err
	}
	if a.ntlm.chalMsg == nil {
		// The answer to our naming NTLM: its NEGOTIATE.
		chal, err := a.ntlm.challengeFor(tok)
		if err != nil {
			return nil, false, err
		}
		return respToken(acceptIncomplete, false, chal, nil), false, nil
	}
	if err := a.ntlm.authenticate(tok); err != nil {
		return nil, false, err
	}
	var ourMIC []byte
	if mic != nil {
		if !bytes.Equal(mic, a.ntlm.mic(a.mechTypes, true)) {
			return nil, false, ErrLogon
		}
		ourMIC = a.ntlm.mic(a.mechTypes, false)
	}
	a.done = true
	return respToken(acceptCompleted, false, nil, ourMIC), true, nil
}

// parseResp reads a NegTokenResp: its responseToken and mechListMIC.
func parseResp(in []byte) (tok, mic []byte, err error) {
	s := cryptobyte.String(in)
	var resp, seq cryptobyte.String
	if !s.ReadASN1(&resp, negTokenResp) || !resp.ReadASN1(&seq, asn1.SEQUENCE) {
		return nil, nil, ErrMalformed
	}
	var t, m cryptobyte.String
	var hasT, hasM bool
	if !seq.SkipOptionalASN1(ctx0) ||
		!seq.SkipOptionalASN1(ctx1) ||
		!seq.ReadOptionalASN1(&t, &hasT, ctx2) ||
		!seq.ReadOptionalASN1(&m, &hasM, ctx3) || !hasT {
		return nil, nil, ErrMalformed
	}
	if !t.ReadASN1Bytes(&tok, asn1.OCTET_STRING) {
		return nil, nil, ErrMalformed
	}
	if hasM && !m.ReadASN1Bytes(&mic, asn1.OCTET_STRING) {
		return nil, nil, ErrMalformed
	}
	return tok, mic, nil
}

// respToken is a NegTokenResp.
func respToken(state int64, withMech bool, tok, mic []byte) []byte {
	var b cryptobyte.Builder
	b.AddASN1(negTokenResp, func(b *cryptobyte.Builder) {
		b.AddASN1(asn1.SEQUENCE, func(b *cryptobyte.Builder) {
			b.AddASN1(ctx0, func(b *cryptobyte.Builder) {
				b.AddASN1Enum(state)
			})
			if withMech {
				b.AddASN1(ctx1, func(b *cryptobyte.Builder) {
					b.AddASN1ObjectIdentifier(oidNTLM)
				})
			}
			if tok != nil {
				b.AddASN1(ctx2, func(b *cryptobyte.Builder) {
					b.AddASN1OctetString(tok)
				})
			}
			if mic != nil {
				b.AddASN1(ctx3, func(b *cryptobyte.Builder) {
					b.AddASN1OctetString(mic)
				})
			}
		})
	})
	return b.BytesOrPanic()
}

// SessionKey is the exported session key of a completed authentication.
func (a *Acceptor) SessionKey() []byte { return a.ntlm.key }

// User is the user name the client gave (checked once Step says done),
// Domain the domain it gave and Workstation its host name: all from the
// peer, to be escaped before they are shown.
func (a *Acceptor) User() string        { return a.ntlm.user }
func (a *Acceptor) Domain() string      { return a.ntlm.domain }
func (a *Acceptor) Workstation() string { return a.ntlm.host }
