package tunnel

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/tunnel/clustertest"
)

// appPair is a loopback TCP connection: the stripe's local end, and the
// application's.
func appPair(t *testing.T) (local, app *net.TCPConn) {
	t.Helper()
	c, s := clustertest.TCPPair(t)
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// testTable is a stripe table of the CLI's that stripes over up to limit
// channels; open, if set, opens its joins.
func testTable(limit int, open func([]byte) (io.ReadWriteCloser, error)) *stripeTable {
	t := &stripeTable{firstID: 1, lastID: ^uint32(0), byID: map[uint32]*stripe{}, open: open}
	t.agree(limit)
	return t
}

// peerStripe is a striped connection carried by the stripe under test, as
// the peer sees it: one end of each channel.
type peerStripe struct {
	s     *stripe
	chans []net.Conn
	done  chan struct{} // closed when carry returned
}

// startStripe carries local over n in-memory channels; the peer holds
// their other ends.
func startStripe(t *testing.T, local io.ReadWriteCloser, n int) *peerStripe {
	t.Helper()
	table := testTable(n, nil)
	p := &peerStripe{s: table.newStripe(local), done: make(chan struct{})}
	first, peer := net.Pipe()
	p.chans = append(p.chans, peer)
	go func() { defer close(p.done); p.s.carry(first) }()
	for range n - 1 {
		mine, peer := net.Pipe()
		if err := table.joinWith(p.s.id, func() (io.ReadWriteCloser, error) { return mine, nil }); err != nil {
			t.Fatal(err)
		}
		p.chans = append(p.chans, peer)
	}
	t.Cleanup(func() {
		for _, c := range p.chans {
			c.Close()
		}
	})
	return p
}

func header(off uint64, n int) []byte {
	b := make([]byte, segmentHeader)
	putSegmentHeader(b, off, n)
	return b
}

// readSegments collects what the stripe sends on every channel until the
// end of the direction, and returns the stream in order.
func (p *peerStripe) readSegments(t *testing.T) []byte {
	t.Helper()
	type segment struct {
		off uint64
		b   []byte // nil: the end
	}
	segments := make(chan segment)
	for _, c := range p.chans {
		go func() {
			for {
				var h [segmentHeader]byte
				if _, err := io.ReadFull(c, h[:]); err != nil {
					return
				}
				s := segment{off: binary.BigEndian.Uint64(h[:])}
				if n := binary.BigEndian.Uint32(h[8:]); n > 0 {
					s.b = make([]byte, n)
					if _, err := io.ReadFull(c, s.b); err != nil {
						return
					}
				}
				segments <- s
			}
		}()
	}
	parts := map[uint64][]byte{}
	var out []byte
	total := int64(-1)
	timeout := time.After(10 * time.Second)
	for int64(len(out)) != total {
		select {
		case s := <-segments:
			if s.b == nil {
				total = int64(s.off)
			}
			parts[s.off] = s.b
		case <-timeout:
			t.Fatalf("after 10 s the stream had %d bytes in order, of %d (-1: no end yet)", len(out), total)
		}
		for b := parts[uint64(len(out))]; len(b) > 0; b = parts[uint64(len(out))] {
			out = append(out, b...)
		}
	}
	return out
}

// expectFrom has app send data and half-close, and checks the peer gets
// it all, in order, and the end.
func (p *peerStripe) expectFrom(t *testing.T, app *net.TCPConn, data []byte) {
	t.Helper()
	go func() {
		app.Write(data)
		app.CloseWrite()
	}()
	if got := p.readSegments(t); !bytes.Equal(got, data) {
		t.Fatalf("the peer got %d bytes, not the %d the application sent", len(got), len(data))
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// readAll reads app until it ends, within a deadline.
func readAll(t *testing.T, app net.Conn) ([]byte, error) {
	t.Helper()
	app.SetReadDeadline(time.Now().Add(10 * time.Second))
	return io.ReadAll(app)
}

func waitCarried(t *testing.T, p *peerStripe) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(clustertest.Settle):
		t.Fatal("the stripe was still carrying after 10 s")
	}
}

func TestStripeReassemblesSegmentsThatArriveOutOfOrder(t *testing.T) {
	local, app := appPair(t)
	const channels = 3
	p := startStripe(t, local, channels)
	data := randomBytes(300 << 10)
	received := make(chan []byte, 1)
	go func() {
		b, _ := readAll(t, app)
		received <- b
	}()
	// Each round gives every channel one segment, of sizes that differ, and
	// delivers their headers last channel first: the receiver holds the
	// later segments while it waits for the first.
	var off uint64
	for len(data[off:]) > 0 {
		type seg struct {
			off uint64
			b   []byte
		}
		var round []seg
		for c := range channels {
			n := min(int(off)%7000+1000*(c+1), len(data)-int(off))
			if n == 0 {
				break
			}
			round = append(round, seg{off, data[off : off+uint64(n)]})
			off += uint64(n)
		}
		var wrote sync.WaitGroup
		for c := len(round) - 1; c >= 0; c-- {
			if _, err := p.chans[c].Write(header(round[c].off, len(round[c].b))); err != nil {
				t.Fatal(err)
			}
			wrote.Go(func() { p.chans[c].Write(round[c].b) })
		}
		wrote.Wait()
	}
	if _, err := p.chans[1].Write(header(off, 0)); err != nil {
		t.Fatal(err)
	}
	if got := <-received; !bytes.Equal(got, data) {
		t.Fatalf("the application read %d bytes, not the %d sent in order", len(got), len(data))
	}
	// The other direction still flows after the half-close.
	p.expectFrom(t, app, randomBytes(10<<10))
	waitCarried(t, p)
}

func TestStripeHalfClosesTowardsThePeerFirst(t *testing.T) {
	local, app := appPair(t)
	p := startStripe(t, local, 2)
	p.expectFrom(t, app, randomBytes(200<<10))
	answer := []byte("the answer, after the request's end")
	go func() {
		p.chans[0].Write(append(header(0, len(answer)), answer...))
		p.chans[0].Write(header(uint64(len(answer)), 0))
	}()
	got, err := readAll(t, app)
	if err != nil || !bytes.Equal(got, answer) {
		t.Fatalf("the application read %q, %v; want %q and the end", got, err, answer)
	}
	waitCarried(t, p)
}

func TestStripeEndsWhenAChannelFailsMidStream(t *testing.T) {
	local, app := appPair(t)
	p := startStripe(t, local, 2)
	first := []byte("the first segment")
	if _, err := p.chans[0].Write(append(header(0, len(first)), first...)); err != nil {
		t.Fatal(err)
	}
	// The segment after the first would come on channel 1, which fails;
	// channel 0 brings a later one, which can never be given in turn.
	go p.chans[0].Write(append(header(uint64(len(first))+100, 5), "later"...))
	p.chans[1].Close()
	got, _ := readAll(t, app)
	if !bytes.Equal(got, first) {
		t.Fatalf("the application read %q, want only what came in order, %q", got, first)
	}
	waitCarried(t, p)
	p.chans[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(p.chans[0]); err != nil && !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("the channel that did not fail was not closed: %v", err)
	}
}

func TestStripeEndsWhenAChannelFailsWhileSending(t *testing.T) {
	local, app := appPair(t)
	p := startStripe(t, local, 1)
	go func() {
		chunk := randomBytes(64 << 10)
		for {
			if _, err := app.Write(chunk); err != nil {
				return
			}
		}
	}()
	var h [segmentHeader]byte
	if _, err := io.ReadFull(p.chans[0], h[:]); err != nil {
		t.Fatal(err)
	}
	p.chans[0].Close()
	waitCarried(t, p)
	if _, err := readAll(t, app); err != nil && !errors.Is(err, net.ErrClosed) && !isReset(err) {
		t.Fatalf("the application's connection did not end: %v", err)
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}

func TestStripeRejectsOverlappingSegments(t *testing.T) {
	local, app := appPair(t)
	p := startStripe(t, local, 1)
	go func() {
		p.chans[0].Write(append(header(0, 4), "abcd"...))
		p.chans[0].Write(append(header(2, 4), "cdef"...))
	}()
	got, _ := readAll(t, app)
	if string(got) != "abcd" {
		t.Fatalf("the application read %q, want %q and then the end", got, "abcd")
	}
	waitCarried(t, p)
}

// slowChannel is a channel whose window is spent: each write waits for the
// window to open again, which it does every 2×stripeGrowWait, as if a
// window adjustment came then. Once the test has ended, writes no longer
// wait.
type slowChannel struct {
	net.Conn
	window <-chan time.Time
	ended  <-chan struct{}
}

func newSlowChannel(t *testing.T, c net.Conn) slowChannel {
	window := time.NewTicker(2 * stripeGrowWait)
	ended := make(chan struct{})
	t.Cleanup(func() {
		window.Stop()
		close(ended)
	})
	return slowChannel{Conn: c, window: window.C, ended: ended}
}

func (c slowChannel) Write(b []byte) (int, error) {
	select {
	case <-c.window:
	case <-c.ended:
	}
	return c.Conn.Write(b)
}

// sendBackToBack sends 16 MiB through two stripes joined back to back over
// slow channels, on an SSH connection whose round trip is rtt, each
// striping over up to limit channels, and returns, for each channel the
// sender added, how many channels it had (counting those opening) when it
// opened that one.
func sendBackToBack(t *testing.T, rtt time.Duration, limit int) []int {
	var a, b *stripeTable
	var sa *stripe
	var openedMu sync.Mutex
	var opened []int
	joinTo := func(peer **stripeTable) func([]byte) (io.ReadWriteCloser, error) {
		return func(payload []byte) (io.ReadWriteCloser, error) {
			sa.mu.Lock()
			had := sa.channels
			sa.mu.Unlock()
			var m stripeOpen
			if err := ssh.Unmarshal(payload, &m); err != nil {
				return nil, err
			}
			mine, theirs := net.Pipe()
			err := (*peer).joinWith(m.ID, func() (io.ReadWriteCloser, error) { return newSlowChannel(t, theirs), nil })
			if err != nil {
				return nil, err
			}
			openedMu.Lock()
			opened = append(opened, had)
			openedMu.Unlock()
			return newSlowChannel(t, mine), nil
		}
	}
	a, b = testTable(limit, joinTo(&b)), testTable(limit, joinTo(&a))
	b.firstID, b.lastID = 2, 0
	a.sawRTT(rtt)
	b.sawRTT(rtt)
	localA, appA := appPair(t)
	localB, appB := appPair(t)
	sa = a.newStripe(localA)
	sb, err := b.accept(sa.id, localB)
	if err != nil {
		t.Fatal(err)
	}
	chA, chB := net.Pipe()
	go sa.carry(newSlowChannel(t, chA))
	go sb.carry(newSlowChannel(t, chB))
	data := randomBytes(16 << 20)
	go func() {
		appA.Write(data)
		appA.CloseWrite()
	}()
	got, err := readAll(t, appB)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes (%v), want the %d sent", len(got), err, len(data))
	}
	appB.CloseWrite()
	if rest, err := readAll(t, appA); err != nil || len(rest) != 0 {
		t.Errorf("the other direction ended with %d bytes, %v", len(rest), err)
	}
	openedMu.Lock()
	defer openedMu.Unlock()
	return slices.Clone(opened)
}

// Each channel takes a write every 2 ms: 32 MB/s a channel. With a round
// trip of 50 ms a channel's window lets 42 MB/s through: the window holds
// it back. The sender doubles its channels each time, up to the limit: 1
// opens 1 (2 then), 2 open 2 (4), 4 open 4 (8).
func TestStripeAddsChannelsWhenTheWindowHoldsItBack(t *testing.T) {
	opened := sendBackToBack(t, 50*time.Millisecond, 8)
	if want := []int{2, 4, 4, 8, 8, 8, 8}; !slices.Equal(opened, want) {
		t.Errorf("the sender had %v channels when it opened each of the ones it added, want %v (doubling up to the limit of 8)", opened, want)
	}
}

// With a round trip of 100 µs a window lets 21 GB/s through: what holds
// the sender back is elsewhere, and more channels would not help.
func TestStripeAddsNoChannelWhenTheWindowIsNotTheLimit(t *testing.T) {
	if opened := sendBackToBack(t, 100*time.Microsecond, 8); len(opened) != 0 {
		t.Errorf("the sender added %d channels, want none", len(opened))
	}
}

func TestStripeLimitIsAgreedAtHello(t *testing.T) {
	for _, c := range []struct{ peer, want int }{{0, 0}, {1, 0}, {-3, 0}, {4, 4}, {maxStripes, maxStripes}, {1000, maxStripes}} {
		if got := testTable(c.peer, nil).limit; got != c.want {
			t.Errorf("a peer saying %d: limit %d, want %d", c.peer, got, c.want)
		}
	}
	t1 := testTable(0, nil)
	if _, err := t1.accept(2, nil); err == nil {
		t.Error("a table that does not stripe accepted a striped connection")
	}
}

// A read of an SSH channel returns what it has, which may end inside a
// segment's header or run into the next segment: the segment reader takes
// each segment whole and in order however the reads cut them.
func TestSegmentReaderTakesSegmentsHoweverReadsCutThem(t *testing.T) {
	var stream []byte
	var want [][]byte
	var off uint64
	for _, n := range []int{5, 70 << 10, 1, 3000, 0} {
		data := randomBytes(n)
		stream = append(append(stream, header(off, n)...), data...)
		want = append(want, data)
		off += uint64(n)
	}
	for name, ch := range map[string]io.Reader{
		"all at once":  bytes.NewReader(stream),
		"byte by byte": iotest.OneByteReader(bytes.NewReader(stream)),
		"in halves":    iotest.HalfReader(bytes.NewReader(stream)),
	} {
		r := segmentReader{ch: ch}
		var at uint64
		for i, data := range want {
			off, n, err := r.header()
			if err != nil || off != at || int(n) != len(data) {
				t.Fatalf("%s: segment %d: header says %d bytes at %d (%v), want %d at %d", name, i, n, off, err, len(data), at)
			}
			var got bytes.Buffer
			if err := r.copyTo(&got, int(n)); err != nil || !bytes.Equal(got.Bytes(), data) {
				t.Fatalf("%s: segment %d: copied %d bytes (%v), not the %d sent", name, i, got.Len(), err, len(data))
			}
			at += uint64(n)
		}
		if _, _, err := r.header(); !errors.Is(err, io.EOF) {
			t.Errorf("%s: after the last segment: %v, want EOF", name, err)
		}
		r.b.release()
	}
}

// writeCounter counts the writes it is given.
type writeCounter struct {
	bytes.Buffer
	writes int
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}

// A segment that arrives in several reads of its channel (its packets) is
// written to the local connection in one write, as far as a buffer holds
// it: a write per packet would cost that connection more system calls and
// packets for the same bytes.
func TestSegmentReaderWritesASegmentThatArrivesInPiecesAtOnce(t *testing.T) {
	const n = bulkBuffer - segmentHeader // a bulk read's segment
	data := randomBytes(n)
	stream := append(header(0, n), data...)
	r := segmentReader{ch: iotest.HalfReader(bytes.NewReader(stream))}
	defer r.b.release()
	r.last = n // a bulk flow: the header's read takes the bulk buffer
	if _, got, err := r.header(); err != nil || got != n {
		t.Fatalf("header: %d bytes (%v), want %d", got, err, n)
	}
	var local writeCounter
	if err := r.copyTo(&local, n); err != nil || !bytes.Equal(local.Bytes(), data) {
		t.Fatalf("copied %d bytes (%v), not the %d sent", local.Len(), err, n)
	}
	if local.writes != 1 {
		t.Errorf("a segment of %d bytes that came in pieces took %d writes, want 1", n, local.writes)
	}
}
