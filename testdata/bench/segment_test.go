package main

import (
	"encoding/binary"
	"testing"
)

// A burst cut into its wire packets: the kept ones carry their own part of
// the payload, sequence number, IP id, flags and valid checksums.
func TestSegmentKeepsWirePackets(t *testing.T) {
	payload := make([]byte, 350)
	for i := range payload {
		payload[i] = byte(i)
	}
	ip := make([]byte, 20+20+len(payload))
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
	binary.BigEndian.PutUint16(ip[4:], 7)
	ip[8], ip[9] = 64, 6
	copy(ip[12:], []byte{198, 18, 48, 2, 198, 18, 0, 5})
	binary.BigEndian.PutUint32(ip[24:], 1000) // seq
	ip[32] = 5 << 4
	ip[33] = 0x18 | 0x01 | 0x80 // PSH ACK FIN CWR
	copy(ip[40:], payload)

	if n, ok := tcp4Segments(ip, 100); !ok || n != 4 {
		t.Fatalf("tcp4Segments = %d, %v; want 4, true", n, ok)
	}
	segs := segment(ip, 100, []bool{true, false, true, true})
	if len(segs) != 3 {
		t.Fatalf("%d segments, want 3", len(segs))
	}
	for k, want := range []struct {
		index, size int
		flags       byte
	}{{0, 100, 0x10 | 0x80}, {2, 100, 0x10}, {3, 50, 0x18 | 0x01}} {
		seg := segs[k][vnetHdrLen:]
		if len(seg) != 40+want.size || int(binary.BigEndian.Uint16(seg[2:])) != len(seg) {
			t.Errorf("segment %d: %d bytes, IP length %d; want %d", want.index, len(seg), binary.BigEndian.Uint16(seg[2:]), 40+want.size)
		}
		if got := binary.BigEndian.Uint16(seg[4:]); got != 7+uint16(want.index) {
			t.Errorf("segment %d: IP id %d", want.index, got)
		}
		if got := binary.BigEndian.Uint32(seg[24:]); got != 1000+uint32(want.index*100) {
			t.Errorf("segment %d: seq %d", want.index, got)
		}
		if seg[33] != want.flags {
			t.Errorf("segment %d: flags %#x, want %#x", want.index, seg[33], want.flags)
		}
		if seg[40] != byte(want.index*100) {
			t.Errorf("segment %d: payload starts with %d", want.index, seg[40])
		}
		if checksum(seg[:20], 0) != 0xffff {
			t.Errorf("segment %d: bad IP checksum", want.index)
		}
		var pseudo [12]byte
		copy(pseudo[:8], seg[12:20])
		pseudo[9] = 6
		binary.BigEndian.PutUint16(pseudo[10:], uint16(len(seg)-20))
		if checksum(seg[20:], checksum(pseudo[:], 0)) != 0xffff {
			t.Errorf("segment %d: bad TCP checksum", want.index)
		}
	}
}
