package wire

import "encoding/binary"

// TransformSize is the size of the transform header before an encrypted
// message.
const TransformSize = 52

// Transform is the header of an encrypted message. Its bytes from the
// nonce on (20..52) are the associated data the cipher authenticates.
type Transform struct {
	Signature    [16]byte // the AEAD tag
	Nonce        [16]byte // 11 bytes used by CCM, 12 by GCM
	OriginalSize uint32
	Flags        uint16 // 1: encrypted
	SessionID    uint64
}

// ParseTransform decodes the transform header at the start of b.
func ParseTransform(b []byte) (Transform, error) {
	var t Transform
	if len(b) < TransformSize {
		return t, ErrShort
	}
	if [4]byte(b[0:4]) != TransformID {
		return t, ErrProtocol
	}
	copy(t.Signature[:], b[4:20])
	copy(t.Nonce[:], b[20:36])
	t.OriginalSize = binary.LittleEndian.Uint32(b[36:])
	t.Flags = binary.LittleEndian.Uint16(b[42:])
	t.SessionID = binary.LittleEndian.Uint64(b[44:])
	return t, nil
}

// Put encodes t into the first TransformSize bytes of b.
func (t *Transform) Put(b []byte) {
	_ = b[TransformSize-1]
	copy(b[0:4], TransformID[:])
	copy(b[4:20], t.Signature[:])
	copy(b[20:36], t.Nonce[:])
	binary.LittleEndian.PutUint32(b[36:], t.OriginalSize)
	binary.LittleEndian.PutUint16(b[40:], 0)
	binary.LittleEndian.PutUint16(b[42:], t.Flags)
	binary.LittleEndian.PutUint64(b[44:], t.SessionID)
}
