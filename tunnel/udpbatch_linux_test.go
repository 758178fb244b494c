package tunnel

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"
)

// TestAUDPSocketsWaitingDatagramsAreReadAsBatches: the datagrams waiting
// in a UDP socket are read in one call, as frames, each whole and in the
// order they came, and a batch stops once it passes batchBytes, never
// splitting a datagram; the largest datagram is one frame of its own size.
func TestAUDPSocketsWaitingDatagramsAreReadAsBatches(t *testing.T) {
	rx, tx := udpPair(t)
	sizes := []int{1200, 8, MaxDatagram, 1200, 40000, 4}
	const sent = 60
	for seq := range sent {
		d := bytes.Repeat([]byte{byte(seq)}, sizes[seq%len(sizes)])
		binary.BigEndian.PutUint32(d, uint32(seq))
		if _, err := tx.Write(d); err != nil {
			t.Fatal(err)
		}
	}
	fr := framesOf(rx)
	buf := make([]byte, 0, batchBytes+frameRoom)
	got, batches, most := 0, 0, 0
	for got < sent {
		rx.SetReadDeadline(time.Now().Add(5 * time.Second))
		frames, err := fr.readFrames(buf[:0], batchBytes)
		if err != nil {
			t.Fatalf("after %d of %d datagrams: %v", got, sent, err)
		}
		if len(frames) > batchBytes+frameRoom {
			t.Fatalf("a batch of %d bytes, over %d", len(frames), batchBytes+frameRoom)
		}
		batches++
		in, lastAt := 0, 0
		for at := 0; at < len(frames); {
			lastAt = at
			n := int(binary.BigEndian.Uint16(frames[at:]))
			b := frames[at+2 : at+2+n]
			at += 2 + n
			want := bytes.Repeat([]byte{byte(got)}, sizes[got%len(sizes)])
			binary.BigEndian.PutUint32(want, uint32(got))
			if !bytes.Equal(b, want) {
				t.Fatalf("datagram %d came as %d bytes, not its %d, or not next", got, len(b), len(want))
			}
			got++
			in++
		}
		if lastAt >= batchBytes {
			t.Fatalf("a frame added at byte %d of a batch, past %d", lastAt, batchBytes)
		}
		most = max(most, in)
	}
	if most < 2 {
		t.Fatalf("%d datagrams waiting were read one at a time (%d batches)", sent, batches)
	}
	t.Logf("%d datagrams in %d batches, at most %d in one", sent, batches, most)
}
