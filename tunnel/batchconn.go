package tunnel

import (
	"net"
	"sync"
	"time"
)

// An SSH connection's writes are gathered by one sender (batchConn): the
// ssh package writes every packet with writes of its own (a 32 KiB data
// packet is two, and its MAC may be a third), and on a busy connection the
// system calls, not the cipher, become the cost. Gathered, what the channels
// wrote while the previous write was in the kernel goes out in one.
const (
	// batchMax is how much may wait for the sender: a writer that would
	// take it past this waits until the sender has taken what waits.
	batchMax = 64 << 10
	// batchCloseWait bounds how long Close tries to send what waits.
	batchCloseWait = time.Second
	// directMax bounds a write that goes out at once, from the writer's
	// own goroutine, when nothing waits and the connection is not being
	// written: a small packet (a request, an answer, a window adjustment)
	// is then not handed to the sender, whose wake-up is a round trip's
	// largest cost on a busy machine. x/crypto/ssh writes a packet smaller
	// than its 4 KiB write buffer in one write, and a larger one in writes
	// of 4 KiB and more, which the sender gathers.
	directMax = 4 << 10
	// laneQueueMax is how much may wait for a lane's sender (makeLane):
	// its writers do not wait at batchMax, so that a small packet is never
	// held behind a data packet's wait (room).
	laneQueueMax = 1 << 20
)

// batchBuffers holds the buffers of writes waiting for the sender, so that
// an idle connection holds none.
var batchBuffers = sync.Pool{New: func() any { b := make([]byte, 0, batchMax); return &b }}

// batchConn is a net.Conn whose writes are copied and sent by one goroutine,
// gathered into as few writes as the kernel's pace allows. Write returns
// once its bytes are copied; an error of the sending is returned by the
// Writes after it. A write of less than directMax bytes when nothing waits
// and nothing is being sent is written at once by Write itself, and its
// error returned, but on a lane's connection (queueForLane). Either way,
// bytes go out in the order of the Writes. Close sends what waits, for at
// most batchCloseWait, then closes the connection. Reads and deadlines are
// the connection's own.
type batchConn struct {
	net.Conn

	mu      sync.Mutex
	changed *sync.Cond // waiting was taken or filled, or closing or err set
	waiting *[]byte    // written, not yet taken by the sender; nil when none
	lane    bool       // a lane's connection (queueForLane)
	taken   broadcast  // woken when what waits is taken (room), or err or closing set
	sending bool       // the connection is being written (by the sender or a direct Write)
	err     error      // a write of the connection failed
	closing bool
	done    chan struct{} // closed when the sender returned
	close   sync.Once
	closed  error
}

// newBatchConn gathers the writes of c, the connection an SSH connection
// runs on (at both ends), makes its reads and writes raw (rawIO), and
// shortens its retransmission wait where it is a TCP connection and the
// system allows (shortenRetransmitWait).
func newBatchConn(c net.Conn) *batchConn {
	shortenRetransmitWait(c)
	b := &batchConn{Conn: rawIO(c), done: make(chan struct{})}
	b.changed = sync.NewCond(&b.mu)
	go b.send()
	return b
}

// Write copies p for the sender. It waits while what waits would grow past
// its limit (batchMax, or a lane's laneQueueMax), so a writer is held to
// the pace of the connection.
func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	limit := batchMax
	if b.lane {
		limit = laneQueueMax
	}
	for b.err == nil && !b.closing && b.waiting != nil && len(*b.waiting)+len(p) > limit {
		b.changed.Wait()
	}
	switch {
	case b.err != nil:
		return 0, b.err
	case b.closing:
		return 0, net.ErrClosed
	case len(p) < directMax && b.waiting == nil && !b.sending && !b.lane:
		return b.writeDirect(p)
	}
	if b.waiting == nil {
		b.waiting = batchBuffers.Get().(*[]byte)
	}
	*b.waiting = append(*b.waiting, p...)
	b.changed.Broadcast()
	return len(p), nil
}

// writeDirect writes p to the connection from the calling goroutine; what
// is written meanwhile waits for the sender, which waits for this write.
// Called with b.mu held, which it releases during the write.
func (b *batchConn) writeDirect(p []byte) (int, error) {
	b.sending = true
	b.mu.Unlock()
	n, err := b.Conn.Write(p)
	b.mu.Lock()
	b.sending = false
	if err != nil && b.err == nil {
		b.err = err
	}
	b.changed.Broadcast()
	return n, err
}

// send writes what waits, all of it in one write, until the connection
// closes or a write fails.
func (b *batchConn) send() {
	defer close(b.done)
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		for (b.waiting == nil || b.sending) && b.err == nil && !(b.closing && !b.sending) {
			b.changed.Wait()
		}
		if b.waiting == nil || b.err != nil {
			return // closing, and everything sent; or a write failed
		}
		buf := b.waiting
		b.waiting = nil
		b.sending = true
		b.changed.Broadcast()
		b.taken.wake()
		b.mu.Unlock()
		_, err := b.Conn.Write(*buf)
		if cap(*buf) <= batchMax {
			*buf = (*buf)[:0]
			batchBuffers.Put(buf)
		}
		b.mu.Lock()
		b.sending = false
		if err != nil {
			b.err = err
			b.changed.Broadcast()
			b.taken.wake()
			return
		}
	}
}

// queueForLane makes b a lane's connection (makeLane): its writes all go
// to the sender, none is written by its writer (which could then wait in
// the system with the SSH connection's write lock held), and its writers
// wait only past laneQueueMax; its pumps wait for room before they write.
func (b *batchConn) queueForLane() {
	b.mu.Lock()
	b.lane = true
	b.mu.Unlock()
}

// room is nil while nothing waits for the sender, or the connection has
// failed or is closing; else a channel closed once the sender has taken
// what waits. A lane's pump writes only when it is nil (datagramRelay):
// so a lane whose TCP connection sends less for a while (a repair, or a
// probe of the round trip by its congestion control) holds little of the
// flow, and a small packet written meanwhile — the window adjustment of a
// channel's reader, which waits for it — does not wait for a data
// packet's room under the SSH connection's write lock.
func (b *batchConn) room() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.waiting == nil || b.err != nil || b.closing {
		return nil
	}
	return b.taken.next()
}

// Close sends what waits, giving the peer batchCloseWait to take it, and
// closes the connection. Later calls return what the first returned.
func (b *batchConn) Close() error {
	b.close.Do(func() {
		b.mu.Lock()
		b.closing = true
		b.changed.Broadcast()
		b.taken.wake()
		b.mu.Unlock()
		b.Conn.SetWriteDeadline(time.Now().Add(batchCloseWait))
		<-b.done
		b.closed = b.Conn.Close()
	})
	return b.closed
}
