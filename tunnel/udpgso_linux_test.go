package tunnel

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestAFrameWriterSendsEachRunOfOneSizeInOneWrite: datagrams of one size
// in a row leave in one write, up to maxSegments of them; a shorter one
// ends its run, a longer one or an empty one starts another; the bytes of
// every write, cut at its size, are the datagrams in order.
func TestAFrameWriterSendsEachRunOfOneSizeInOneWrite(t *testing.T) {
	sizes := []int{1200, 1200, 1200, 700, 1200, 9000, 0, 5, 5}
	for range maxSegments + 3 {
		sizes = append(sizes, 100)
	}
	frames, want := framesOfSizes(sizes...)
	type write struct {
		b    []byte
		size int // 0: one datagram
	}
	var writes []write
	w := &frameWriter{offload: true, send: func(run [][]byte, oob []byte) error {
		size := 0
		if oob != nil {
			size = int(binary.NativeEndian.Uint16(oob[unix.CmsgLen(0):]))
		}
		writes = append(writes, write{bytes.Join(run, nil), size})
		return nil
	}}
	if err := w.writeFrames(frames); err != nil {
		t.Fatal(err)
	}
	var got [][]byte
	var counts []int
	for _, wr := range writes {
		n := 0
		eachDatagram(wr.b, wr.size, func(d []byte) { got = append(got, d); n++ })
		counts = append(counts, n)
	}
	if !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("sent %d datagrams, not the %d given in order", len(got), len(want))
	}
	// 1200×3+700 | 1200 | 9000 | 0 | 5×2 | 100×64 | 100×3
	if wantCounts := []int{4, 1, 1, 1, 2, maxSegments, 3}; !slices.Equal(counts, wantCounts) {
		t.Fatalf("datagrams per write %v, want %v", counts, wantCounts)
	}
}

// TestAFrameWriterWhoseRunIsRefusedSendsEachDatagram: when the system
// refuses a run in one write, its datagrams go one at a time, and so does
// all the writer sends after; a write that fails is reported, an ICMP
// port unreachable is not.
func TestAFrameWriterWhoseRunIsRefusedSendsEachDatagram(t *testing.T) {
	frames, want := framesOfSizes(1200, 1200, 1200)
	var got [][]byte
	runs := 0
	w := &frameWriter{offload: true, send: func(run [][]byte, oob []byte) error {
		if oob != nil {
			runs++
			return errors.New("no segmentation here")
		}
		if len(run) != 1 {
			t.Fatalf("a write of %d datagrams without a segment size", len(run))
		}
		got = append(got, bytes.Clone(run[0]))
		return nil
	}}
	for range 2 {
		if err := w.writeFrames(frames); err != nil {
			t.Fatal(err)
		}
	}
	if runs != 1 || len(got) != 6 || !slices.EqualFunc(got[:3], want, bytes.Equal) || !slices.EqualFunc(got[3:], want, bytes.Equal) {
		t.Fatalf("%d runs tried, %d datagrams sent one at a time; want 1 and 6, in order", runs, len(got))
	}
	w.send = func(run [][]byte, oob []byte) error { return &net.OpError{Op: "write", Err: syscall.ECONNREFUSED} }
	if err := w.writeFrames(frames); err != nil {
		t.Fatalf("a port unreachable reported: %v", err)
	}
	broken := errors.New("broken")
	w.send = func(run [][]byte, oob []byte) error { return broken }
	if err := w.writeFrames(frames); !errors.Is(err, broken) {
		t.Fatalf("a failed write: %v", err)
	}
}

// TestTheSizeOfACoalescedRunIsFoundWithoutAllocating: a read's control
// messages give the size of its run's datagrams, after another control
// message too (a flow's destination), 0 when there is none, and finding it
// allocates nothing, as it runs for every read.
func TestTheSizeOfACoalescedRunIsFoundWithoutAllocating(t *testing.T) {
	gro := make([]byte, unix.CmsgSpace(4))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&gro[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_GRO
	h.SetLen(unix.CmsgLen(4))
	binary.NativeEndian.PutUint32(gro[unix.CmsgLen(0):], 1200)
	dst := unix.PktInfo4(&unix.Inet4Pktinfo{})
	for _, c := range []struct {
		oob  []byte
		want int
	}{{gro, 1200}, {append(slices.Clone(dst), gro...), 1200}, {dst, 0}, {nil, 0}, {gro[:3], 0}} {
		if got := coalescedSize(c.oob); got != c.want {
			t.Errorf("control messages of %d bytes: size %d, want %d", len(c.oob), got, c.want)
		}
	}
	both := append(slices.Clone(dst), gro...)
	if n := testing.AllocsPerRun(100, func() { coalescedSize(both) }); n != 0 {
		t.Errorf("finding the size allocated %v times a read", n)
	}
}
