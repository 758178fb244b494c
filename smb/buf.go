//go:build linux

package smb

import "sync"

// Buffers of requests and responses come from two pools: small ones for
// the many short messages, large ones (a whole frame) for reads and writes.
const (
	smallBuf = 64 << 10
	largeBuf = maxFrame + 4096
)

var (
	smallPool = sync.Pool{New: func() any { b := make([]byte, 0, smallBuf); return &b }}
	largePool = sync.Pool{New: func() any { b := make([]byte, 0, largeBuf); return &b }}
)

// getBuf is an empty buffer with room for n bytes.
func getBuf(n int) []byte {
	switch {
	case n <= smallBuf:
		return (*smallPool.Get().(*[]byte))[:0]
	case n <= largeBuf:
		return (*largePool.Get().(*[]byte))[:0]
	}
	return make([]byte, 0, n)
}

// putBuf gives back a buffer from getBuf.
func putBuf(b []byte) {
	b = b[:0]
	switch cap(b) {
	case smallBuf:
		smallPool.Put(&b)
	case largeBuf:
		largePool.Put(&b)
	}
}
