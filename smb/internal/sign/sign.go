package sign

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"fmt"

	"plug/smb/internal/wire"
)

// Signing algorithms, as numbered in the SIGNING_CAPABILITIES context.
const (
	HMACSHA256 uint16 = 0
	AESCMAC    uint16 = 1
	AESGMAC    uint16 = 2
)

// Signer signs and checks whole SMB2 messages: the header's 16-byte
// signature field is the signature of the message with that field zeroed.
// A Signer is safe for concurrent use.
type Signer struct {
	alg  uint16
	key  []byte
	cmac *cmac
	gcm  cipher.AEAD
}

// New is a Signer for alg with key (the session key for HMAC-SHA256, the
// derived signing key otherwise).
func New(alg uint16, key []byte) (*Signer, error) {
	s := &Signer{alg: alg, key: append([]byte(nil), key...)}
	switch alg {
	case HMACSHA256:
	case AESCMAC:
		c, err := newCMAC(key)
		if err != nil {
			return nil, err
		}
		s.cmac = c
	case AESGMAC:
		b, err := aes.NewCipher(key)
		if err != nil {
			return nil, err
		}
		if s.gcm, err = cipher.NewGCM(b); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("signing algorithm %d is not known", alg)
	}
	return s, nil
}

// Sign writes the signature of msg (one message of a chain, with its
// padding) into its header and sets the header's signed flag.
func (s *Signer) Sign(msg []byte) {
	f := binary.LittleEndian.Uint32(msg[wire.OffFlags:])
	binary.LittleEndian.PutUint32(msg[wire.OffFlags:], f|wire.FlagSigned)
	sig := msg[wire.OffSignature : wire.OffSignature+16]
	clear(sig)
	sum := s.sum(msg)
	copy(sig, sum[:])
}

// Verify reports whether msg carries its correct signature. msg is left
// as it was.
func (s *Signer) Verify(msg []byte) bool {
	if len(msg) < wire.HeaderSize {
		return false
	}
	var got [16]byte
	sig := msg[wire.OffSignature : wire.OffSignature+16]
	copy(got[:], sig)
	clear(sig)
	want := s.sum(msg)
	copy(sig, got[:])
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

func (s *Signer) sum(msg []byte) [16]byte {
	var out [16]byte
	switch s.alg {
	case HMACSHA256:
		m := hmac.New(sha256.New, s.key)
		m.Write(msg)
		copy(out[:], m.Sum(nil))
	case AESCMAC:
		out = s.cmac.sum(msg)
	case AESGMAC:
		// The nonce is the message id, then a word whose bit 0 says the
		// sender is the server and bit 1 that the message is a CANCEL.
		var nonce [12]byte
		copy(nonce[:8], msg[24:32])
		var role uint32
		if binary.LittleEndian.Uint32(msg[wire.OffFlags:])&wire.FlagResponse != 0 {
			role |= 1
		}
		if binary.LittleEndian.Uint16(msg[12:]) == wire.Cancel {
			role |= 2
		}
		binary.LittleEndian.PutUint32(nonce[8:], role)
		var tag [16]byte
		copy(out[:], s.gcm.Seal(tag[:0], nonce[:], nil, msg))
	}
	return out
}
