package tunnel

import (
	"errors"
	"io"
	"sync"

	"golang.org/x/crypto/ssh"
)

// halfCloser is a stream whose sending half can be closed on its own, as TCP
// connections and SSH channels can.
type halfCloser interface{ CloseWrite() error }

// pipe copies a to b and b to a until both directions end, then closes both.
// The end of one direction is passed on as a half-close, so request-response
// protocols that shut down their sending side keep working.
func pipe(a, b io.ReadWriteCloser) {
	done := make(chan struct{})
	go func() { defer close(done); copyHalf(b, a) }()
	copyHalf(a, b)
	<-done
	a.Close()
	b.Close()
}

func copyHalf(dst, src io.ReadWriteCloser) {
	err := copyStream(dst, src)
	hc, ok := dst.(halfCloser)
	if err != nil || !ok {
		dst.Close()
		src.Close()
		return
	}
	hc.CloseWrite()
}

// A direction of a connection reads into a small buffer while what it
// carries is sparse (requests, answers, an idle connection: thousands of
// those must stay cheap), and into a large pooled one once a read fills the
// small one, until a read is small again: a connection waiting for its next
// request holds only the small one. The large one holds two SSH packets'
// data (channelData), so that a fast stream costs few system calls and
// packets (measured: about 1.5 times the throughput of io.Copy's 32 KiB).
const (
	sparseBuffer = 2 << 10
	bulkBuffer   = 2 * channelData
)

// channelData is the most data plug puts in one SSH channel packet.
// x/crypto/ssh copies every packet it receives into a new buffer: the
// message's type, channel and length (9 bytes), then the data. With
// channelData bytes that buffer is 32 KiB, the largest of Go's small
// objects, which its allocator keeps ready per size; with the 32 KiB of
// data a channel allows, 9 bytes more make it a large object, a span of
// 40 KiB taken from the heap and zeroed for each packet, and garbage that
// brings the next collection sooner: 41.6 KB allocated per 32 KiB carried
// against 33.5 KB (TestChannelDataPacketsCostTheReceiverLess; on the
// bench's Kubernetes, testdata/bench/README.md, "UDP on loopback").
const channelData = 32<<10 - 9

// writeData writes p to w: to an SSH channel in writes of at most
// channelData bytes, each one packet; to anything else in one write.
func writeData(w io.Writer, p []byte) (int, error) {
	if _, ok := w.(ssh.Channel); !ok {
		return w.Write(p)
	}
	n := 0
	for len(p) > 0 {
		m, err := w.Write(p[:min(len(p), channelData)])
		n += m
		if err != nil {
			return n, err
		}
		p = p[m:]
	}
	return n, nil
}

var bulkBuffers = sync.Pool{New: func() any { b := make([]byte, bulkBuffer); return &b }}

// streamBuffer is the read buffer of one direction of a connection, sparse
// or bulk as above. Its first headroom bytes are kept for a header the
// reader puts before what it read (a stripe's segment header); what is read
// goes into Space.
type streamBuffer struct {
	headroom int
	sparse   []byte
	bulk     *[]byte
	buf      []byte
}

// space is where the next read goes.
func (b *streamBuffer) space() []byte {
	if b.buf == nil {
		b.sparse = make([]byte, b.headroom+sparseBuffer)
		b.buf = b.sparse
	}
	return b.buf[b.headroom:]
}

// withHeader is the header room and the n bytes read after it.
func (b *streamBuffer) withHeader(n int) []byte { return b.buf[:b.headroom+n] }

// adapt takes the size of the last read: a full one moves to the bulk
// buffer, a small one back to the sparse buffer. It reports whether the
// read was full.
func (b *streamBuffer) adapt(n int) bool {
	full := n == len(b.buf)-b.headroom
	switch {
	case full:
		b.use(true)
	case n < sparseBuffer:
		b.use(false)
	}
	return full
}

// fit takes the bulk buffer for a read of n bytes, more than the sparse
// one holds, and the sparse one for others.
func (b *streamBuffer) fit(n int) {
	b.space()
	b.use(n > sparseBuffer)
}

// use switches to the bulk buffer or back to the sparse one.
func (b *streamBuffer) use(bulk bool) {
	switch {
	case bulk && b.bulk == nil:
		b.bulk = bulkBuffers.Get().(*[]byte)
		b.buf = *b.bulk
	case !bulk && b.bulk != nil:
		b.release()
		b.buf = b.sparse
	}
}

// release gives the bulk buffer back to the pool.
func (b *streamBuffer) release() {
	if b.bulk != nil {
		bulkBuffers.Put(b.bulk)
		b.bulk = nil
	}
}

// copyStream copies src to dst until src ends (nil) or either fails.
func copyStream(dst io.Writer, src io.Reader) error {
	var b streamBuffer
	defer b.release()
	for {
		buf := b.space()
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := writeData(dst, buf[:n]); werr != nil {
				return werr
			}
			counters.bytes.Add(uint64(n))
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		b.adapt(n)
	}
}
