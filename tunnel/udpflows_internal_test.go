package tunnel

import (
	"bytes"
	"slices"
	"testing"
)

// TestAFlowQueuesWhatFitsOfARunAndReadsItADatagramAtATime: a read's run
// of datagrams waits as one, as many whole datagrams of it as the queue
// has room for; an empty datagram is a datagram; Read and readFrames take
// them one datagram each, in order. A large read waits in the buffer it
// was read into, counted as the whole buffer, where the queue has room
// for that; else, as a small read, in a copy, counted as its bytes.
func TestAFlowQueuesWhatFitsOfARunAndReadsItADatagramAtATime(t *testing.T) {
	f := &datagramFlow{d: &DatagramFlows{spares: make(chan []byte, spareReads)}, queue: make(chan datagramRun, flowQueue), closed: make(chan struct{})}
	enqueue := func(b []byte, size int, wantHanded bool) {
		t.Helper()
		if handed := f.enqueue(append(f.d.readBuffer()[:0], b...), size); handed != wantHanded {
			t.Fatalf("a read of %d bytes: handed over %v, want %v", len(b), handed, wantHanded)
		}
	}
	run := bytes.Repeat([]byte{9}, maxRead) // 64 datagrams of 1 KiB
	for range 30 {
		enqueue(run, 1<<10, true)
	}
	enqueue(run[:100], 0, false)
	enqueue(run[:MaxDatagram], 0, true)                       // counted as its buffer, maxRead
	enqueue(run[:flowQueueBytes-10-31*maxRead-100], 0, false) // no room for a buffer: copied; 10 bytes of room left
	enqueue([]byte("aaaabbbbccccdd"), 4, false)               // room for 2 of its 4 datagrams
	enqueue(nil, 0, false)                                    // an empty datagram fits in any room
	enqueue([]byte("eee"), 0, false)                          // 2 bytes of room left
	if len(f.queue) != 35 || f.queued != flowQueueBytes-2 {
		t.Fatalf("queued %d reads, %d bytes; want 35 and %d", len(f.queue), f.queued, flowQueueBytes-2)
	}
	buf := make([]byte, MaxDatagram)
	for i, want := range append(slices.Repeat([]int{1 << 10}, 30*64), 100, MaxDatagram, flowQueueBytes-10-31*maxRead-100) {
		if n, err := f.Read(buf); err != nil || n != want {
			t.Fatalf("Read %d: %d bytes, %v; want %d", i, n, err, want)
		}
	}
	frames, err := f.readFrames(nil, batchBytes)
	if err != nil {
		t.Fatal(err)
	}
	want := appendFrame(appendFrame(appendFrame(nil, []byte("aaaa")), []byte("bbbb")), nil)
	if !bytes.Equal(frames, want) {
		t.Fatalf("readFrames: %q; want %q", frames, want)
	}
	if f.queued != 0 || f.taken.b != nil {
		t.Fatalf("after every datagram was read: %d bytes queued, %q taken", f.queued, f.taken.b)
	}
}

// TestAFlowsQueueHoldsAWindowForEachChannelThatCarriesIt: carried by 4
// channels (its own and 3 lanes'), a flow's queue takes 4 windows of
// datagrams; back on one, it takes no more until it is under one window.
func TestAFlowsQueueHoldsAWindowForEachChannelThatCarriesIt(t *testing.T) {
	f := &datagramFlow{d: &DatagramFlows{spares: make(chan []byte, spareReads)}, queue: make(chan datagramRun, flowQueue), closed: make(chan struct{})}
	fill := func() int { // until a datagram more is dropped
		for n := len(f.queue); ; n++ {
			f.enqueue(make([]byte, 4<<10), 0)
			if len(f.queue) == n {
				return n
			}
		}
	}
	if got := fill(); got != flowQueueBytes>>12 {
		t.Fatalf("carried by one channel, the queue took %d datagrams of 4 KiB, want %d", got, flowQueueBytes>>12)
	}
	f.carriedBy(4)
	if got := fill(); got != 4*flowQueueBytes>>12 {
		t.Fatalf("carried by 4 channels, the queue took %d datagrams of 4 KiB, want %d", got, 4*flowQueueBytes>>12)
	}
	f.carriedBy(1)
	if f.enqueue(make([]byte, 4<<10), 0); len(f.queue) != 4*flowQueueBytes>>12 {
		t.Fatal("back on one channel, a full queue took one more datagram")
	}
}

func TestKeptOfRun(t *testing.T) {
	for _, c := range []struct{ n, size, room, want int }{
		{100, 0, 100, 100},
		{100, 0, 99, -1},
		{0, 0, 0, 0},
		{120, 40, 119, 80},
		{110, 40, 109, 80}, // the last datagram, shorter, does not fit
		{120, 40, 39, -1},
		{120, 40, -5, -1},
	} {
		if got := keptOfRun(c.n, c.size, c.room); got != c.want {
			t.Errorf("keptOfRun(%d, %d, %d) = %d; want %d", c.n, c.size, c.room, got, c.want)
		}
	}
}
