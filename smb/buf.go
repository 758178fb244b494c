//go:build linux

package smb

import "sync"

// Buffers of requests and responses come from two pools: small ones for
// the many short messages, large ones (a whole frame) for reads, writes
// and the other large payloads.
//
// Large buffers in use are counted server-wide: each holds one of the
// server's tokens (Server.large), taken before the buffer and given back
// with it, so that a server holds at most largeBufs of them whatever its
// clients send. A connection waiting for a token holds at most one large
// buffer meanwhile (the frame it is answering), and there are more tokens
// than connections: some token is always held by work that ends (a
// response being written, within writeTimeout).
const (
	smallBuf = 64 << 10
	largeBuf = maxFrame + 4096
)

// largeBufs is the count of large buffers a server with maxConns
// logged-in connections may hold at once: one per connection and maxIO
// more.
func largeBufs(maxConns int) int { return maxConns + maxUnauthed + maxIO }

var (
	smallPool = sync.Pool{New: func() any { b := make([]byte, 0, smallBuf); return &b }}
	largePool = sync.Pool{New: func() any { b := make([]byte, 0, largeBuf); return &b }}
)

// getBuf is an empty buffer with room for n bytes, n at most largeBuf; a
// large one waits for a token of the server's.
func (s *Server) getBuf(n int) []byte {
	if n <= smallBuf {
		return (*smallPool.Get().(*[]byte))[:0]
	}
	s.large <- struct{}{}
	return (*largePool.Get().(*[]byte))[:0]
}

// putBuf gives back a buffer from getBuf, and its token if it is a large
// one. b may have been resliced but not grown past its capacity.
func (s *Server) putBuf(b []byte) {
	b = b[:0]
	switch cap(b) {
	case smallBuf:
		smallPool.Put(&b)
	case largeBuf:
		largePool.Put(&b)
		<-s.large
	default:
		panic("smb: a buffer given back that did not come from getBuf")
	}
}
