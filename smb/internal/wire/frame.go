package wire

import (
	"fmt"
	"io"
)

// FrameHeaderSize is the size of the Direct TCP transport header: a zero
// byte and a 24-bit big-endian length.
const FrameHeaderSize = 4

// FrameLen reads a transport header from r and returns the length of the
// message after it. A length over max, or a first byte other than zero,
// is an error: the connection cannot be trusted to stay in step.
func FrameLen(r io.Reader, max int) (int, error) {
	var h [FrameHeaderSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, err
	}
	if h[0] != 0 {
		return 0, fmt.Errorf("transport header type %#x is not a session message", h[0])
	}
	n := int(h[1])<<16 | int(h[2])<<8 | int(h[3])
	if n > max {
		return 0, fmt.Errorf("message of %d bytes is over the limit of %d", n, max)
	}
	return n, nil
}

// PutFrameHeader writes the transport header for a message of n bytes
// into b[0:4].
func PutFrameHeader(b []byte, n int) {
	b[0] = 0
	b[1] = byte(n >> 16)
	b[2] = byte(n >> 8)
	b[3] = byte(n)
}
