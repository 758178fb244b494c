package tunnel

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"plug/tunnel/clustertest"
)

func TestBatchConnDeliversEveryWriteInOrder(t *testing.T) {
	client, server := clustertest.TCPPair(t)
	b := newBatchConn(client)
	var want bytes.Buffer
	got := make(chan []byte, 1)
	go func() {
		all, _ := io.ReadAll(server)
		got <- all
	}()
	// Writes from 1 byte to three times batchMax, each numbered by its
	// bytes, so that a reordering or a lost write shows.
	for i := range 300 {
		p := bytes.Repeat([]byte{byte(i)}, 1+(i*7919)%(3*batchMax))
		want.Write(p)
		if n, err := b.Write(p); n != len(p) || err != nil {
			t.Fatalf("write %d: %d, %v", i, n, err)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case all := <-got:
		if !bytes.Equal(all, want.Bytes()) {
			t.Fatalf("the peer read %d bytes, not the %d written in order", len(all), want.Len())
		}
	case <-time.After(clustertest.Settle):
		t.Fatal("the peer never saw the end of the stream")
	}
}

func TestBatchConnCloseSendsWhatWaits(t *testing.T) {
	// net.Pipe has no buffer: what was written waits in the batchConn
	// until the peer reads, which it starts only after Close was called.
	near, far := net.Pipe()
	defer far.Close()
	b := newBatchConn(near)
	// Not a small write, which would be written at once.
	msg := bytes.Repeat([]byte("the last message before the close "), directMax)
	if _, err := b.Write(msg); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	got, err := io.ReadAll(far)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("the peer read %d bytes, want the %d of the message", len(got), len(msg))
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write(msg); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a write after Close returned %v, want net.ErrClosed", err)
	}
}

func TestBatchConnCloseGivesUpOnAPeerThatDoesNotRead(t *testing.T) {
	near, far := net.Pipe()
	defer far.Close()
	b := newBatchConn(near)
	if _, err := b.Write(make([]byte, directMax)); err != nil { // not small: it waits for the sender
		t.Fatal(err)
	}
	start := time.Now()
	closed := make(chan struct{})
	go func() { b.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(batchCloseWait + 5*time.Second):
		t.Fatal("Close waited on a peer that does not read")
	}
	if took := time.Since(start); took < batchCloseWait/2 {
		t.Fatalf("Close returned after %v without giving the peer its time", took)
	}
}

// holdSender writes to b, whose peer far reads only when told, one write
// its sender takes and blocks on in the pipe (not a small one, which
// would be written at once), of which the peer read one byte, then
// batchMax bytes more, which wait for the sender. It returns the first
// write's bytes still to be read.
func holdSender(t *testing.T, b *batchConn, far net.Conn) (unread []byte) {
	t.Helper()
	first := make([]byte, directMax)
	if _, err := b.Write(first); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(far, first[:1]); err != nil { // the sender is in its write now
		t.Fatal(err)
	}
	if _, err := b.Write(make([]byte, batchMax)); err != nil {
		t.Fatal(err)
	}
	return first[1:]
}

// writeInBackground writes p to b in a goroutine of its own and says the
// write's error once it returns.
func writeInBackground(b *batchConn, p []byte) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := b.Write(p)
		done <- err
	}()
	return done
}

func TestBatchConnHoldsAWriterAtBatchMax(t *testing.T) {
	near, far := net.Pipe()
	defer far.Close()
	b := newBatchConn(near)
	defer b.Close()
	// What waits is batchMax: a third write must wait for the peer.
	holdSender(t, b, far)
	third := writeInBackground(b, []byte("third"))
	select {
	case err := <-third:
		t.Fatalf("a write past batchMax returned (%v) before the peer read", err)
	case <-time.After(100 * time.Millisecond):
	}
	// The peer reads all: the third, once what waited is taken, may be
	// written by its writer itself.
	go io.Copy(io.Discard, far)
	select {
	case err := <-third:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(clustertest.Settle):
		t.Fatal("the held writer never went on once the peer read")
	}
}

func TestBatchConnWriteFailsAfterThePeerIsGone(t *testing.T) {
	client, server := clustertest.TCPPair(t)
	b := newBatchConn(client)
	defer b.Close()
	server.(*net.TCPConn).SetLinger(0)
	server.Close() // a reset
	deadline := time.Now().Add(10 * time.Second)
	// Once the sender's write meets the reset, the writes after it fail;
	// until then they fill what may wait, and then wait on the sender.
	for {
		if _, err := b.Write(make([]byte, 1024)); err != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("writes to a reset connection kept succeeding")
		}
	}
}

func TestBatchConnWritesASmallPacketItselfWhenIdle(t *testing.T) {
	// net.Pipe has no buffer: a Write that writes to it itself returns
	// only once the peer read all of it.
	near, far := net.Pipe()
	defer far.Close()
	b := newBatchConn(near)
	defer b.Close()
	var returned atomic.Bool
	seen := make(chan bool, 1)
	go func() {
		one := make([]byte, 1)
		io.ReadFull(far, one)
		seen <- returned.Load() // one byte is still unread: Write cannot have returned if it writes itself
		io.ReadFull(far, one)
	}()
	if _, err := b.Write([]byte("ab")); err != nil {
		t.Fatal(err)
	}
	returned.Store(true)
	if <-seen {
		t.Fatal("a small write on an idle connection returned before it was written: it was handed to the sender")
	}
}

func TestBatchConnKeepsSmallWritesBehindWhatWaits(t *testing.T) {
	near, far := net.Pipe()
	defer far.Close()
	b := newBatchConn(near)
	defer b.Close()
	// The sender blocks in the pipe with the first, large write until the
	// peer reads; the small writes after it, on a connection being
	// written, must wait behind it and behind the large ones queued.
	var want bytes.Buffer
	for i := range 20 {
		p := bytes.Repeat([]byte{byte(i)}, 1+(1-i%2)*(directMax+i))
		want.Write(p)
		if _, err := b.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]byte, want.Len())
	if _, err := io.ReadFull(far, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatal("the peer read the writes out of order")
	}
}

func TestALanesSmallWriteDoesNotWaitBehindItsDataAndRoomSaysWhenItHasRoom(t *testing.T) {
	near, far := net.Pipe()
	defer far.Close()
	b := newBatchConn(near)
	defer b.Close()
	room := makeLane(b)
	if ch := room(); ch != nil {
		t.Fatal("an idle lane says it has no room")
	}
	// What waits is what may wait on another connection (batchMax).
	unread := holdSender(t, b, far)
	full := room()
	if full == nil {
		t.Fatal("a lane with a write waiting for its sender says it has room")
	}
	// A window adjustment is written under the SSH connection's write
	// lock: it must not wait for the peer to read.
	small := writeInBackground(b, []byte("window adjustment"))
	select {
	case err := <-small:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(clustertest.Settle):
		t.Fatal("a small write on a lane waited behind the data written before it")
	}
	select {
	case <-full:
		t.Fatal("room said the lane had room before the sender took what waits")
	default:
	}
	if _, err := io.ReadFull(far, unread); err != nil {
		t.Fatal(err)
	}
	select {
	case <-full:
	case <-time.After(clustertest.Settle):
		t.Fatal("room never said the lane had room once the sender took what waited")
	}
	rest := make([]byte, batchMax+len("window adjustment"))
	if _, err := io.ReadFull(far, rest); err != nil {
		t.Fatal(err)
	}
	if got := string(rest[batchMax:]); got != "window adjustment" {
		t.Fatalf("the small write arrived as %q, not after the data written before it", got)
	}
}
