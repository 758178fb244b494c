package tunnel

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"testing/iotest"
	"time"
)

// udpPair is a UDP socket on loopback, with plug's buffers, and a socket
// connected to it; both are closed when the test ends.
func udpPair(t *testing.T) (rx, tx *net.UDPConn) {
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rx.Close() })
	bufferDatagrams(rx)
	tx, err = net.DialUDP("udp4", nil, rx.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Close() })
	return rx, tx
}

// framesOfSizes is a batch of frames of datagrams of the sizes given, each
// datagram's bytes telling it from the others.
func framesOfSizes(sizes ...int) ([]byte, [][]byte) {
	var frames []byte
	var ds [][]byte
	for i, n := range sizes {
		d := bytes.Repeat([]byte{byte(i + 1)}, n)
		ds = append(ds, d)
		frames = appendFrame(frames, d)
	}
	return frames, ds
}

// TestRunsOfDatagramsCrossUDPSocketsWhole: frames written to a UDP socket
// (runs of one size in one write, where the system can) reach a socket
// that takes coalesced runs as the same datagrams, each whole, in order,
// and are read as their frames; the writer of a conn that is not a UDP
// socket writes each datagram.
func TestRunsOfDatagramsCrossUDPSocketsWhole(t *testing.T) {
	rx, tx := udpPair(t)
	sizes := []int{1200, 1200, 1200, 1200, 300, 1200, 1200, MaxDatagram, 0, 64, 64, 64}
	frames, _ := framesOfSizes(sizes...)
	if err := framesTo(tx).writeFrames(frames); err != nil {
		t.Fatal(err)
	}
	fr := framesOf(rx)
	var got []byte
	for len(got) < len(frames) {
		rx.SetReadDeadline(time.Now().Add(5 * time.Second))
		batch, err := fr.readFrames(make([]byte, 0, batchBytes+frameRoom), batchBytes)
		if err != nil {
			t.Fatalf("after %d of %d bytes of frames: %v", len(got), len(frames), err)
		}
		got = append(got, batch...)
	}
	if !bytes.Equal(got, frames) {
		t.Fatalf("the frames read are not those written (%d bytes, %d written)", len(got), len(frames))
	}

	a, b := net.Pipe()
	defer a.Close()
	go func() { framesTo(a).writeFrames(frames) }()
	buf := make([]byte, maxRead)
	for i, n := range sizes {
		b.SetReadDeadline(time.Now().Add(5 * time.Second))
		m, err := b.Read(buf)
		if err != nil || m != n {
			t.Fatalf("datagram %d over a pipe: %d bytes, %v; want %d", i, m, err, n)
		}
	}
}

// TestAFrameStreamHandsOverWholeFramesOnly: frames that arrive a byte at
// a time are handed over whole, each when its last byte came; a stream
// that ends inside a frame yields the whole frames before it and then an
// error, never the part; a length over MaxDatagram is malformed.
func TestAFrameStreamHandsOverWholeFramesOnly(t *testing.T) {
	frames, want := framesOfSizes(10, 0, MaxDatagram, 20)
	s := newFrameStream(iotest.OneByteReader(bytes.NewReader(frames)))
	for i, d := range want {
		got, err := s.next()
		if err != nil || !bytes.Equal(got, appendFrame(nil, d)) {
			t.Fatalf("frame %d (%d bytes): %d bytes handed over, %v", i, len(d), len(got), err)
		}
	}
	if got, err := s.next(); err != io.EOF {
		t.Fatalf("after the last frame: %d bytes, %v; want EOF", len(got), err)
	}

	s = newFrameStream(bytes.NewReader(frames[:len(frames)-1]))
	var whole []byte
	for {
		got, err := s.next()
		if err != nil {
			if !errors.Is(err, io.ErrUnexpectedEOF) || got != nil {
				t.Fatalf("the cut frame: %d bytes, %v", len(got), err)
			}
			break
		}
		whole = append(whole, got...)
	}
	if !bytes.Equal(whole, frames[:len(frames)-22]) {
		t.Fatalf("the whole frames before a cut one: %d bytes; want %d", len(whole), len(frames)-22)
	}

	bad := binary.BigEndian.AppendUint16(nil, MaxDatagram+1)
	if _, err := newFrameStream(bytes.NewReader(bad)).next(); !errors.Is(err, errMalformedDatagram) {
		t.Fatalf("a frame of %d bytes: %v", MaxDatagram+1, err)
	}
}

// TestAFrameStreamGrowsOnlyForWhatArrives: a stream of small frames read
// one at a time keeps the buffer it started with; one whose reads find
// more waiting than the buffer holds grows it until a read takes two
// batches' worth at once, and no further.
func TestAFrameStreamGrowsOnlyForWhatArrives(t *testing.T) {
	small, _ := framesOfSizes(100, 100, 100)
	s := newFrameStream(iotest.OneByteReader(bytes.NewReader(small)))
	for range 3 {
		if _, err := s.next(); err != nil {
			t.Fatal(err)
		}
	}
	if cap(s.buf) != streamStart {
		t.Fatalf("small frames grew the buffer to %d bytes, from %d", cap(s.buf), streamStart)
	}
	sizes := make([]int, 400)
	for i := range sizes {
		sizes[i] = 1200
	}
	burst, _ := framesOfSizes(sizes...)
	s = newFrameStream(bytes.NewReader(burst))
	most := 0
	for {
		got, err := s.next()
		if err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		most = max(most, len(got))
	}
	if cap(s.buf) != streamRoom || most <= streamRoom-1202 {
		t.Fatalf("a burst of %d bytes: the buffer grew to %d bytes, at most %d handed over at once; want %d, over %d", len(burst), cap(s.buf), most, streamRoom, streamRoom-1202)
	}
}
