package tunnel

import (
	"bytes"
	"slices"
	"testing"
)

// TestAFlowQueuesWhatFitsOfARunAndReadsItADatagramAtATime: a read's run
// of datagrams waits as one, as many whole datagrams of it as the queue
// has room for; an empty datagram is a datagram; Read and readFrames take
// them one datagram each, in order.
func TestAFlowQueuesWhatFitsOfARunAndReadsItADatagramAtATime(t *testing.T) {
	f := &datagramFlow{d: &DatagramFlows{}, queue: make(chan datagramRun, flowQueue), closed: make(chan struct{})}
	run := bytes.Repeat([]byte{9}, 1<<16) // 64 datagrams of 1 KiB
	for range 31 {
		f.enqueue(run, 1<<10)
	}
	f.enqueue(run[:MaxDatagram], 0)
	f.enqueue(run[:flowQueueBytes-10-31<<16-MaxDatagram], 0) // 10 bytes of room left
	f.enqueue([]byte("aaaabbbbccccdd"), 4)                   // room for 2 of its 4 datagrams
	f.enqueue(nil, 0)                                        // an empty datagram fits in any room
	f.enqueue([]byte("eee"), 0)                              // 2 bytes of room left
	if len(f.queue) != 35 || f.queued != flowQueueBytes-2 {
		t.Fatalf("queued %d reads, %d bytes; want 35 and %d", len(f.queue), f.queued, flowQueueBytes-2)
	}
	buf := make([]byte, MaxDatagram)
	for i, want := range append(slices.Repeat([]int{1 << 10}, 31*64), MaxDatagram, 19) {
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
