package tunnel

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"
)

// TestADatagramStreamIsItsSocketsFrames: frames written to a flow's
// stream, cut anywhere, leave its socket as their datagrams, each whole;
// the datagrams its socket receives are read back as their frames, also
// by reads shorter than a frame; a frame longer than a datagram fails the
// write.
func TestADatagramStreamIsItsSocketsFrames(t *testing.T) {
	peer, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	conn, err := net.DialUDP("udp4", nil, peer.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	s := newDatagramStream(conn)
	defer s.Close()
	frames, want := framesOfSizes(1200, 1200, 7, 0, 3000, 1200)
	for _, cut := range [][2]int{{0, 1}, {1, 1203}, {1203, 1204}, {1204, 1500}, {1500, len(frames)}} {
		if n, err := s.Write(frames[cut[0]:cut[1]]); err != nil || n != cut[1]-cut[0] {
			t.Fatalf("writing bytes %d to %d: %d, %v", cut[0], cut[1], n, err)
		}
	}
	buf := make([]byte, maxRead)
	var from *net.UDPAddr
	for i, d := range want {
		peer.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, addr, err := peer.ReadFromUDP(buf)
		if err != nil || !bytes.Equal(buf[:n], d) {
			t.Fatalf("datagram %d: %d bytes, %v; want its %d", i, n, err, len(d))
		}
		from = addr
	}
	for _, d := range want {
		peer.WriteToUDP(d, from)
	}
	var got []byte
	p := make([]byte, 500) // shorter than a frame of 1,200
	for len(got) < len(frames) {
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := s.Read(p)
		if err != nil {
			t.Fatalf("after %d of %d bytes: %v", len(got), len(frames), err)
		}
		got = append(got, p[:n]...)
	}
	if !bytes.Equal(got, frames) {
		t.Fatal("the frames read are not those of the datagrams received, in order")
	}
	bad := binary.BigEndian.AppendUint16(nil, MaxDatagram+1)
	if _, err := s.Write(bad); !errors.Is(err, errMalformedDatagram) {
		t.Fatalf("a frame of %d bytes: %v", MaxDatagram+1, err)
	}
}
