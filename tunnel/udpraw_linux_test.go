package tunnel

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"
)

// TestRawDatagramCallsNameEachSenderAndReachIt: a socket read with raw
// calls names each datagram's sender, an IPv4 one on an IPv4 socket and
// on a socket of both families, an IPv6 one on the latter, and a reply
// sent to that name reaches the sender; a run sent from its parts arrives
// as its datagrams.
func TestRawDatagramCallsNameEachSenderAndReachIt(t *testing.T) {
	for _, c := range []struct{ listen, dial, at string }{
		{"udp4", "udp4", "127.0.0.1:0"},
		{"udp", "udp4", "[::]:0"},
		{"udp", "udp6", "[::]:0"},
	} {
		pc, err := net.ListenPacket(c.listen, c.at)
		if err != nil {
			t.Fatalf("%s on %s: %v", c.listen, c.at, err)
		}
		defer pc.Close()
		port := pc.LocalAddr().(*net.UDPAddr).Port
		to := "127.0.0.1"
		if c.dial == "udp6" {
			to = "::1"
		}
		sender, err := net.Dial(c.dial, net.JoinHostPort(to, strconv.Itoa(port)))
		if err != nil {
			t.Fatal(err)
		}
		defer sender.Close()
		if _, err := sender.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		u := pc.(*net.UDPConn)
		u.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 64)
		n, _, from, err := datagramReceiver(u)(buf, nil)
		want := sender.LocalAddr().(*net.UDPAddr).AddrPort()
		if err != nil || string(buf[:n]) != "ping" || from.Addr().Unmap() != want.Addr() || from.Port() != want.Port() {
			t.Fatalf("%s socket, %s sender: %q from %v, %v; want ping from %v", c.listen, c.dial, buf[:n], from, err, want)
		}
		if err := datagramSender(u, from)([][]byte{[]byte("po"), []byte("ng")}, nil); err != nil {
			t.Fatalf("the reply to %v: %v", from, err)
		}
		sender.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := sender.Read(buf); err != nil || string(buf[:n]) != "pong" {
			t.Fatalf("%s sender got %q, %v; want pong", c.dial, buf[:n], err)
		}
	}

	rx, tx := udpPair(t)
	run := [][]byte{bytes.Repeat([]byte{1}, 1200), bytes.Repeat([]byte{2}, 1200), bytes.Repeat([]byte{3}, 700)}
	if err := datagramSender(tx, netip.AddrPort{})(run, appendSegmentSize(nil, 1200)); err != nil {
		t.Fatal(err)
	}
	fr := framesOf(rx)
	var got [][]byte
	for len(got) < len(run) {
		rx.SetReadDeadline(time.Now().Add(5 * time.Second))
		frames, err := fr.readFrames(nil, batchBytes)
		if err != nil {
			t.Fatalf("after %d datagrams: %v", len(got), err)
		}
		for len(frames) > 0 {
			n := int(binary.BigEndian.Uint16(frames))
			got = append(got, frames[2:2+n])
			frames = frames[2+n:]
		}
	}
	for i := range run {
		if !bytes.Equal(got[i], run[i]) {
			t.Fatalf("datagram %d of the run: %d bytes, not the %d sent", i, len(got[i]), len(run[i]))
		}
	}
}
