package tunnel

import (
	"errors"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// A UDP socket that many senders reach — a name's UDP port that a run
// consumes, on the developer's machine; a name's UDP port that a run
// serves, in the agent — splits its datagrams into flows, one per sender
// address, each carried over a datagram channel of its own (udp.go), so
// that the replies of the other side go back to the sender they answer.

// flowQueue is how many reads of one flow's datagrams (each one datagram,
// or a run that arrived coalesced) may wait to be carried, and
// flowQueueBytes how many bytes; more are dropped, as a full socket buffer
// drops them. The flow's writer waits only when the channel's window (2 MiB
// in golang.org/x/crypto/ssh) is spent, for the peer to give it back: a
// round trip of the connection, in which a sender at the rate the channel
// carries sends about one window. So the queue holds one window's bytes
// for each channel that carries the flow (one, and one more on each lane:
// lanes.go) — the bandwidth-delay product of the fastest path they can
// fill — and a count that bounds the cost of small datagrams. A read's datagrams
// wait together, in one copy: a run costs one allocation, not one each.
const (
	flowQueue      = 4096
	flowQueueBytes = 2 << 20
)

// A DatagramFlows reads its socket into buffers of maxRead bytes. A read
// of at least handedOver bytes (a coalesced run) waits in its flow's queue
// in the buffer it was read into, which goes back to the DatagramFlows'
// spare buffers, at most spareReads, once the flow's reader has taken its
// datagrams (one more is left to the collector); a smaller one waits in a
// copy of its own, so that a queue of small datagrams does not hold a
// large buffer each. The spares are a list of their own, not a sync.Pool,
// so that what a burst left is bounded where the agent's memory goes back
// to the system after it (scavenge.go): a pool's buffers stay alive until
// two collections have passed.
const spareReads = 4

// handedOver is the least read that waits in the buffer it was read into:
// half of one. Such a read counts as its whole buffer against its queue's
// caps: they count the memory that waits.
const handedOver = maxRead / 2

// socketBuffer is the receive buffer asked of each UDP socket plug reads
// datagrams from (the kernel caps it at net.core.rmem_max; Linux's default
// is 208 KiB, about 90 datagrams of 1,200 bytes): a burst that arrives
// while the reader is busy — the echoes of datagrams that crossed the
// connection together after a lost TCP segment — waits there instead of
// being dropped.
const socketBuffer = 4 << 20

// bufferDatagrams asks conn, if it is a UDP socket, for socketBuffer.
func bufferDatagrams(conn net.Conn) {
	if u, ok := conn.(*net.UDPConn); ok {
		u.SetReadBuffer(socketBuffer)
	}
}

// FlowBudget counts the flows of one or more DatagramFlows against a cap:
// Take returns false when no flow may start; Give returns one.
type FlowBudget interface {
	Take() bool
	Give()
}

// ByteBudget is a FlowBudget that also counts the bytes of the datagrams
// waiting in the flows' queues: Hold returns false when n bytes more may
// not wait (the datagram is dropped); Release gives n back.
type ByteBudget interface {
	Hold(n int) bool
	Release(n int)
}

// FlowCap is a FlowBudget of at most Max flows at once, and a ByteBudget
// of at most MaxQueued bytes waiting in their queues together (0: only each
// flow's own queue bounds them).
type FlowCap struct {
	Max       int32
	MaxQueued int64
	n         atomic.Int32
	queued    atomic.Int64
}

// Take counts one flow more, unless Max are counted already.
func (c *FlowCap) Take() bool {
	if c.n.Add(1) > c.Max {
		c.n.Add(-1)
		return false
	}
	return true
}

// Give counts one flow less.
func (c *FlowCap) Give() { c.n.Add(-1) }

// Hold counts n bytes more waiting, unless that would pass MaxQueued.
func (c *FlowCap) Hold(n int) bool {
	if c.MaxQueued > 0 && c.queued.Add(int64(n)) > c.MaxQueued {
		c.queued.Add(-int64(n))
		return false
	}
	return true
}

// Release counts n bytes less waiting.
func (c *FlowCap) Release(n int) {
	if c.MaxQueued > 0 {
		c.queued.Add(-int64(n))
	}
}

// DatagramFlows reads the datagrams that reach a UDP socket and hands each
// sender's to a handler as one flow: a net.Conn whose Read returns the
// next datagram the sender sent and whose Write sends one back to it from
// the socket. A flow ends when the handler closes it; the sender's next
// datagram then starts a new one. The datagrams of a sender that would
// start a flow past the budget are dropped, as are those that find their
// flow's queue (flowQueue, flowQueueBytes) or the budget's bytes
// (ByteBudget) full.
type DatagramFlows struct {
	pc     *net.UDPConn
	budget FlowBudget
	bytes  ByteBudget // the budget's, if it counts bytes
	handle func(net.Conn)
	done   chan struct{}
	spares chan []byte // read buffers given back, at most spareReads

	mu    sync.Mutex
	flows map[netip.AddrPort]*datagramFlow
}

// NewDatagramFlows starts reading pc. handle is called in a goroutine of
// its own for each new flow, and must close it when done with it. A flow's
// replies go from the address its sender wrote to, where the system says
// it (Linux), even when pc is bound to every address of the machine.
func NewDatagramFlows(pc *net.UDPConn, budget FlowBudget, handle func(net.Conn)) *DatagramFlows {
	reportDestinations(pc)
	takeCoalesced(pc)
	bufferDatagrams(pc)
	d := &DatagramFlows{pc: pc, budget: budget, handle: handle, done: make(chan struct{}), spares: make(chan []byte, spareReads), flows: map[netip.AddrPort]*datagramFlow{}}
	d.bytes, _ = budget.(ByteBudget)
	go d.receive()
	return d
}

// Conn is the socket d reads.
func (d *DatagramFlows) Conn() *net.UDPConn { return d.pc }

// Close closes the socket and ends every flow. It returns nil.
func (d *DatagramFlows) Close() error {
	d.pc.Close()
	<-d.done
	d.mu.Lock()
	flows := slices.Collect(maps.Values(d.flows))
	d.mu.Unlock()
	for _, f := range flows {
		f.Close()
	}
	return nil
}

func (d *DatagramFlows) receive() {
	defer close(d.done)
	buf := d.readBuffer()
	oob := make([]byte, controlSpace+coalescedSpace)
	read := datagramReceiver(d.pc)
	for {
		n, oobn, src, err := read(buf, oob)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		f := d.flow(src, oob[:oobn])
		if f == nil {
			continue // over the budget: dropped
		}
		if f.enqueue(buf[:n], coalescedSize(oob[:oobn])) {
			buf = d.readBuffer()
		}
	}
}

// readBuffer is a spare read buffer, or a new one: maxRead bytes.
func (d *DatagramFlows) readBuffer() []byte {
	select {
	case b := <-d.spares:
		return b
	default:
		return make([]byte, maxRead)
	}
}

// spare gives back b, a read buffer (whatever its length, its capacity
// maxRead) no run lies in any more, kept whole for a later read if fewer
// than spareReads are.
func (d *DatagramFlows) spare(b []byte) {
	select {
	case d.spares <- b[:maxRead]:
	default:
	}
}

// flow returns src's flow, starting it if it is new (its replies sent with
// the control message oob calls for); nil when the budget allows no other.
func (d *DatagramFlows) flow(src netip.AddrPort, oob []byte) *datagramFlow {
	d.mu.Lock()
	defer d.mu.Unlock()
	if f := d.flows[src]; f != nil {
		return f
	}
	if !d.budget.Take() {
		return nil
	}
	f := &datagramFlow{d: d, src: src, from: replyControl(oob), queue: make(chan datagramRun, flowQueue), closed: make(chan struct{})}
	d.flows[src] = f
	go d.handle(f)
	return f
}

// datagramFlow is one sender's datagrams as a net.Conn.
type datagramFlow struct {
	d      *DatagramFlows
	src    netip.AddrPort
	from   []byte // the control message naming the replies' source; nil: the kernel picks
	queue  chan datagramRun
	closed chan struct{}
	once   sync.Once

	mu       sync.Mutex
	queued   int  // bytes in queue
	ended    bool // closed: nothing more is queued
	channels int  // the channels that carry the flow, less one (carriedBy)

	// Set and read by the flow's one reader only:
	deadline time.Time   // of Read
	taken    datagramRun // the datagrams of a run taken off the queue, not yet read
	holding  []byte      // the read buffer the latest run taken lies in; nil: none
}

// datagramRun is one datagram, or when size is over 0 a run of datagrams
// of size bytes each, the last maybe shorter (eachDatagram). A queued run's
// b is never nil, even for an empty datagram: nil b is no datagram. A
// queued run lies in a read buffer of its DatagramFlows when its capacity
// is maxRead (lent); else in a copy, whose capacity is its length.
type datagramRun struct {
	b    []byte
	size int
}

// next returns the first datagram of r and the rest (nil b when none).
func (r datagramRun) next() ([]byte, datagramRun) {
	if r.size <= 0 || len(r.b) <= r.size {
		return r.b, datagramRun{}
	}
	return r.b[:r.size], datagramRun{r.b[r.size:], r.size}
}

func (f *datagramFlow) Read(b []byte) (int, error) {
	if err := f.take(); err != nil {
		return 0, err
	}
	var d []byte
	d, f.taken = f.taken.next()
	return copy(b, d), nil
}

// readFrames is the frameReader of the flow: its queue's datagrams, as
// many as wait (udp.go).
func (f *datagramFlow) readFrames(dst []byte, limit int) ([]byte, error) {
	if err := f.take(); err != nil {
		return dst, err
	}
	for {
		for f.taken.b != nil && len(dst) < limit {
			var d []byte
			d, f.taken = f.taken.next()
			dst = appendFrame(dst, d)
		}
		if len(dst) >= limit {
			return dst, nil
		}
		select {
		case r := <-f.queue:
			f.took(r)
		default:
			return dst, nil
		}
	}
}

// took makes r, off the queue, the run the reader takes datagrams of.
// The datagrams of the run before are all read, and copied out by the
// reader's callers: its buffer is a spare.
func (f *datagramFlow) took(r datagramRun) {
	f.dequeued(r)
	if f.holding != nil {
		f.d.spare(f.holding)
	}
	f.taken, f.holding = r, nil
	if r.lent() {
		f.holding = r.b
	}
}

// take waits, unless datagrams of a run taken earlier are left, for the
// next run of the queue, until the read deadline.
func (f *datagramFlow) take() error {
	if f.taken.b != nil {
		return nil
	}
	var expired <-chan time.Time
	if !f.deadline.IsZero() {
		t := time.NewTimer(time.Until(f.deadline))
		defer t.Stop()
		expired = t.C
	}
	select {
	case r := <-f.queue:
		f.took(r)
		return nil
	case <-f.closed:
		return net.ErrClosed
	case <-expired:
		return os.ErrDeadlineExceeded
	}
}

func (f *datagramFlow) Write(b []byte) (int, error) {
	if f.from != nil {
		n, _, err := f.d.pc.WriteMsgUDPAddrPort(b, f.from, f.src)
		return n, err
	}
	return f.d.pc.WriteToUDPAddrPort(b, f.src)
}

// enqueue queues the datagrams of one read, b (one datagram, or a run of
// datagrams of size bytes each, as datagramRun), for Read: as many of them
// as the flow's queue has room for, unless the flow has ended or the
// budget has no room for them. The others are dropped. b lies in a read
// buffer of the flow's DatagramFlows: what is kept of a read of
// handedOver bytes or more is queued where it lies, and counted as the
// whole buffer, where the queue has room for that; enqueue then returns
// true, the buffer now the flow's. Another is queued in a copy, and
// enqueue returns false.
func (f *datagramFlow) enqueue(b []byte, size int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ended || len(f.queue) == cap(f.queue) {
		return false
	}
	room := (1 + f.channels) * flowQueueBytes
	n := keptOfRun(len(b), size, room-f.queued)
	if n < 0 {
		return false
	}
	lend := n >= handedOver && cap(b) == maxRead && f.queued+maxRead <= room
	held := n
	if lend {
		held = maxRead
	}
	if f.d.bytes != nil && !f.d.bytes.Hold(held) {
		return false
	}
	r := datagramRun{b: b[:n], size: size}
	if !lend {
		r.b = make([]byte, n) // never nil; its capacity its length
		copy(r.b, b)
	}
	f.queued += r.held()
	f.queue <- r
	return lend
}

// carriedBy says how many channels carry the flow (datagramRelay): its
// queue holds flowQueueBytes for each.
func (f *datagramFlow) carriedBy(channels int) {
	f.mu.Lock()
	f.channels = max(channels, 1) - 1
	f.mu.Unlock()
}

// lent is whether r lies in a read buffer of its DatagramFlows.
func (r datagramRun) lent() bool { return cap(r.b) == maxRead }

// held is the memory r holds while it waits in a queue, as the queue's
// caps count it: its read buffer's, or its copy's.
func (r datagramRun) held() int {
	if r.lent() {
		return maxRead
	}
	return len(r.b)
}

// keptOfRun is how many of the n bytes of a read's datagrams (a run of
// size bytes each when size is over 0) fit in room bytes, whole datagrams
// only; -1 when not one does.
func keptOfRun(n, size, room int) int {
	switch {
	case n <= room:
		return n
	case size <= 0 || room < size:
		return -1
	}
	return room / size * size
}

// dequeued counts run r out of the queue.
func (f *datagramFlow) dequeued(r datagramRun) {
	f.mu.Lock()
	f.queued -= r.held()
	f.mu.Unlock()
	if f.d.bytes != nil {
		f.d.bytes.Release(r.held())
	}
}

// Close ends the flow, drops what waits in its queue and gives its place
// in the budget back.
func (f *datagramFlow) Close() error {
	f.once.Do(func() {
		close(f.closed)
		f.mu.Lock()
		f.ended = true // nothing more is queued: the queue can be drained
		f.mu.Unlock()
		for drained := false; !drained; {
			select {
			case r := <-f.queue:
				f.dequeued(r)
			default:
				drained = true
			}
		}
		f.d.mu.Lock()
		delete(f.d.flows, f.src)
		f.d.mu.Unlock()
		f.d.budget.Give()
	})
	return nil
}

func (f *datagramFlow) LocalAddr() net.Addr                { return f.d.pc.LocalAddr() }
func (f *datagramFlow) RemoteAddr() net.Addr               { return net.UDPAddrFromAddrPort(f.src) }
func (f *datagramFlow) SetDeadline(t time.Time) error      { return f.SetReadDeadline(t) }
func (f *datagramFlow) SetReadDeadline(t time.Time) error  { f.deadline = t; return nil }
func (f *datagramFlow) SetWriteDeadline(t time.Time) error { return nil }
