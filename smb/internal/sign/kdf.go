package sign

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
)

// Derive is the SP800-108 KDF in counter mode with HMAC-SHA256, as SMB 3.x
// uses it: bits of key material from ki, label and context. Label and
// context are used as given, terminating zeros included.
func Derive(ki, label, context []byte, bits int) []byte {
	n := (bits + 255) / 256
	out := make([]byte, 0, n*sha256.Size)
	m := hmac.New(sha256.New, ki)
	var word [4]byte
	for i := 1; i <= n; i++ {
		m.Reset()
		binary.BigEndian.PutUint32(word[:], uint32(i))
		m.Write(word[:])
		m.Write(label)
		m.Write([]byte{0})
		m.Write(context)
		binary.BigEndian.PutUint32(word[:], uint32(bits))
		m.Write(word[:])
		out = m.Sum(out)
	}
	return out[:bits/8]
}
