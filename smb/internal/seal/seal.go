package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"plug/smb/internal/wire"
)

// Ciphers, as numbered in the ENCRYPTION_CAPABILITIES context.
const (
	AES128CCM uint16 = 1
	AES128GCM uint16 = 2
	AES256CCM uint16 = 3
	AES256GCM uint16 = 4
)

// KeySize is the key length of cipher id in bytes.
func KeySize(id uint16) int {
	if id == AES256CCM || id == AES256GCM {
		return 32
	}
	return 16
}

// Sealer encrypts the messages one side sends and decrypts the ones it
// receives, each direction with its own key. It is safe for concurrent use.
type Sealer struct {
	in, out cipher.AEAD
	nonce   int
	// Nonces of sent messages are a counter and a random suffix, never
	// reused for the life of the key.
	counter atomic.Uint64
	salt    [4]byte
}

// New is a Sealer for cipher id that opens with inKey and seals with outKey.
func New(id uint16, inKey, outKey []byte) (*Sealer, error) {
	mk := func(key []byte) (cipher.AEAD, error) {
		b, err := aes.NewCipher(key)
		if err != nil {
			return nil, err
		}
		switch id {
		case AES128CCM, AES256CCM:
			return newCCM(b), nil
		case AES128GCM, AES256GCM:
			return cipher.NewGCM(b)
		}
		return nil, fmt.Errorf("cipher %d is not known", id)
	}
	s := &Sealer{}
	var err error
	if s.in, err = mk(inKey); err != nil {
		return nil, err
	}
	if s.out, err = mk(outKey); err != nil {
		return nil, err
	}
	s.nonce = s.in.NonceSize()
	if _, err := rand.Read(s.salt[:]); err != nil {
		return nil, err
	}
	return s, nil
}

// ErrDecrypt is returned for an encrypted message that does not open.
var ErrDecrypt = errors.New("encrypted message does not decrypt")

// Open decrypts msg, a transform header and its ciphertext, in place and
// returns the plaintext (a sub-slice of msg). msg must have 16 bytes of
// spare capacity.
func (s *Sealer) Open(msg []byte) ([]byte, error) {
	t, err := wire.ParseTransform(msg)
	if err != nil {
		return nil, err
	}
	ct := msg[wire.TransformSize:]
	if int(t.OriginalSize) != len(ct) || t.Flags != 1 {
		return nil, ErrDecrypt
	}
	// The tag travels in the header, the AEAD wants it after the text.
	if cap(ct)-len(ct) < 16 {
		return nil, ErrDecrypt
	}
	withTag := append(ct, t.Signature[:]...)
	pt, err := s.in.Open(ct[:0], t.Nonce[:s.nonce], withTag, msg[20:wire.TransformSize])
	if err != nil {
		return nil, ErrDecrypt
	}
	return pt, nil
}

// Seal encrypts in place buf[wire.TransformSize:], one message or a chain,
// for the session sid, and writes the transform header into
// buf[:wire.TransformSize]. buf must have 16 bytes of spare capacity.
func (s *Sealer) Seal(buf []byte, sid uint64) {
	pt := buf[wire.TransformSize:]
	t := wire.Transform{OriginalSize: uint32(len(pt)), Flags: 1, SessionID: sid}
	binary.LittleEndian.PutUint64(t.Nonce[:], s.counter.Add(1))
	copy(t.Nonce[8:s.nonce], s.salt[:s.nonce-8])
	t.Put(buf)
	out := s.out.Seal(pt[:0], t.Nonce[:s.nonce], pt, buf[20:wire.TransformSize])
	copy(buf[4:20], out[len(pt):])
}
