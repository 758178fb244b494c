package tunnel_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// udpEchoServer answers each datagram on 127.0.0.1 with prefix and the
// datagram, and returns its address.
func udpEchoServer(t testing.TB, prefix string) string {
	return udpServer(t, func(d []byte, _ net.Addr) []byte { return append([]byte(prefix), d...) })
}

// udpServer answers each datagram on 127.0.0.1, d from from, with
// answer(d, from), and returns its address.
func udpServer(t testing.TB, answer func(d []byte, from net.Addr) []byte) string {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	pc.(*net.UDPConn).SetReadBuffer(4 << 20) // a burst of echoes is not dropped before it is read
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(answer(buf[:n], from), from)
		}
	}()
	return pc.LocalAddr().String()
}

// datagramAgent is an agent whose platform has a name "dns" with UDP port
// 53, answered by a UDP echo.
func datagramAgent(t testing.TB, opts ...func(*tunnel.Agent)) (string, ssh.PublicKey) {
	p := tunneltest.NewPlatform()
	p.AddWorkload("dns:53", udpEchoServer(t, "dns says "))
	p.SetNames(tunnel.ClusterName{Name: "dns", UDPPorts: []int{53}})
	addr, hostKey, _ := tunneltest.StartAgent(t, p, opts...)
	return addr, hostKey
}

// carried returns the local end of a flow carried to address.
func carried(t *testing.T, s *tunnel.Session, address string) (net.Conn, <-chan error) {
	local, remote := net.Pipe()
	t.Cleanup(func() { local.Close() })
	errc := make(chan error, 1)
	go func() { errc <- s.CarryDatagrams(context.Background(), remote, address) }()
	return local, errc
}

func exchange(c net.Conn, msg string) (string, error) {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	buf := make([]byte, 65536)
	n, err := c.Read(buf)
	return string(buf[:n]), err
}

// TestDatagramsReachAUDPName: a flow carried to a name's UDP port reaches
// the workload and its replies come back, datagram for datagram; the
// name's TCP side is not dialled for it.
func TestDatagramsReachAUDPName(t *testing.T) {
	addr, hostKey := datagramAgent(t)
	signer, _ := newKey(t)
	s, _ := connect(t, addr, hostKey, signer, tunnel.RunInfo{})
	waitCatalog(t, s, 2*time.Second, "dns/udp 53", func(c tunnel.Catalog) bool {
		return len(c.Names) == 1 && len(c.Names[0].UDPPorts) == 1 && c.Names[0].UDPPorts[0] == 53
	})
	local, _ := carried(t, s, "dns:53")
	for _, msg := range []string{"a", strings.Repeat("x", 1400), strings.Repeat("y", tunnel.MaxDatagram-len("dns says "))} {
		got, err := exchange(local, msg)
		if err != nil || got != "dns says "+msg {
			t.Fatalf("a datagram of %d bytes: got %d bytes, %v", len(msg), len(got), err)
		}
	}
	_, errc := carried(t, s, "dns:54")
	var dialErr *tunnel.DialError
	if err := <-errc; !errors.As(err, &dialErr) || !strings.Contains(err.Error(), "UDP port 53, not 54") {
		t.Fatalf("a port the name does not have: %v", err)
	}
}

// TestAMalformedDatagramFrameClosesOnlyItsChannel: a frame longer than a
// datagram ends its own flow, also behind a good frame of the same write;
// another flow of the same connection goes on.
func TestAMalformedDatagramFrameClosesOnlyItsChannel(t *testing.T) {
	addr, hostKey := datagramAgent(t)
	signer, _ := newKey(t)
	conn, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{User: "dev", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: ssh.FixedHostKey(hostKey), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	payload := ssh.Marshal(struct {
		Host       string
		Port       uint32
		Origin     string
		OriginPort uint32
	}{"dns", 53, "127.0.0.1", 0})
	open := func() ssh.Channel {
		ch, reqs, err := conn.OpenChannel("datagram@plug", payload)
		if err != nil {
			t.Fatal(err)
		}
		go ssh.DiscardRequests(reqs)
		return ch
	}
	frame := func(b []byte) []byte { return append(binary.BigEndian.AppendUint16(nil, uint16(len(b))), b...) }
	bad, good := open(), open()
	// A good frame, then a malformed one in the same write, as a batch.
	bad.Write(append(frame([]byte("first")), 0xff, 0xff, 1, 2, 3))
	done := make(chan error, 1)
	go func() { _, err := io.ReadAll(bad); done <- err }()
	select {
	case <-done:
	case <-time.After(clustertest.Settle):
		t.Fatal("the channel with a malformed frame stayed open")
	}
	// A datagram may be lost on the way, as UDP's may: the other flow is
	// asked again each second, as a UDP client asks, until it answers.
	want := frame([]byte("dns says still here"))
	got := make([]byte, len(want))
	answered := make(chan error, 1)
	go func() { _, err := io.ReadFull(good, got); answered <- err }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	deadline := time.After(clustertest.Settle)
	for sent := 1; ; sent++ {
		good.Write(frame([]byte("still here")))
		select {
		case err := <-answered:
			if err != nil || string(got) != string(want) {
				t.Fatalf("the other flow: %q, %v", got, err)
			}
			t.Logf("the other flow answered after %d datagram(s)", sent)
			return
		case <-tick.C:
		case <-deadline:
			t.Fatalf("the other flow did not answer %d datagrams", sent)
		}
	}
}

// TestAFloodOfUDPFlowsIsCappedPerKey: each flow is one of the key's
// channels; past the cap, a new flow is refused with the cap named.
func TestAFloodOfUDPFlowsIsCappedPerKey(t *testing.T) {
	addr, hostKey := datagramAgent(t, func(a *tunnel.Agent) { a.Limits = tunnel.Limits{ChannelsPerKey: 3} })
	signer, _ := newKey(t)
	s, _ := connect(t, addr, hostKey, signer, tunnel.RunInfo{})
	for i := range 3 {
		local, _ := carried(t, s, "dns:53")
		if _, err := exchange(local, "flow"); err != nil {
			t.Fatalf("flow %d: %v", i, err)
		}
	}
	_, errc := carried(t, s, "dns:53")
	if err := <-errc; err == nil || !strings.Contains(err.Error(), "PLUG_MAX_CHANNELS_PER_KEY") {
		t.Fatalf("a fourth flow: %v", err)
	}
}

// localFlows is a name's UDP port as a run serves it to its program: a
// socket on loopback whose senders are each one flow, carried to target
// through s (DatagramFlows, CarryDatagrams). It returns a socket of the
// program that sends to it.
func localFlows(t testing.TB, s *tunnel.Session, target string) *net.UDPConn {
	t.Helper()
	pc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	flows := tunnel.NewDatagramFlows(pc, &tunnel.FlowCap{Max: 4}, func(f net.Conn) {
		if err := s.CarryDatagrams(context.Background(), f, target); err != nil {
			f.Close()
		}
	})
	t.Cleanup(func() { flows.Close() })
	c, err := net.DialUDP("udp4", nil, pc.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetReadBuffer(4 << 20)
	return c
}

// TestABurstOfDatagramsCrossesWholeAndInOrder: datagrams sent in bursts
// (which cross the connection batched, several to a channel write) come
// back from the echo each whole, none split or merged, in the order they
// were sent; the largest a UDP/IPv4 packet holds, 65,507 bytes, among
// them. UDP may lose some: bursts are sent until each size came back.
func TestABurstOfDatagramsCrossesWholeAndInOrder(t *testing.T) {
	p := tunneltest.NewPlatform()
	p.AddWorkload("echo:7", udpEchoServer(t, ""))
	p.SetNames(tunnel.ClusterName{Name: "echo", UDPPorts: []int{7}})
	addr, hostKey, _ := tunneltest.StartAgent(t, p)
	signer, _ := newKey(t)
	s, _ := connect(t, addr, hostKey, signer, tunnel.RunInfo{})
	waitCatalog(t, s, 2*time.Second, "echo/udp 7", func(c tunnel.Catalog) bool { return len(c.Names) == 1 })
	c := localFlows(t, s, "echo:7")
	sizes := []int{4, 1, 1200, 40000, tunnel.MaxDatagram, 0, 9000}
	// Datagram seq has sizes[seq%len(sizes)] bytes: its sequence number
	// (where it has room), then bytes that follow from it.
	datagram := func(seq uint32) []byte {
		d := make([]byte, sizes[int(seq)%len(sizes)])
		for i := range d {
			d[i] = byte(seq*7 + uint32(i))
		}
		if len(d) >= 4 {
			binary.BigEndian.PutUint32(d, seq)
		}
		return d
	}
	seen := map[int]bool{}
	buf := make([]byte, 65536)
	deadline := time.Now().Add(clustertest.Settle)
	var next, last uint32 // the next to send; the latest echoed, +1
	for len(seen) < len(sizes) {
		if time.Now().After(deadline) {
			t.Fatalf("sizes echoed within %v: %v of %v", clustertest.Settle, seen, sizes)
		}
		for range 3 * len(sizes) {
			c.Write(datagram(next))
			next++
		}
		for {
			c.SetReadDeadline(time.Now().Add(time.Second))
			n, err := c.Read(buf)
			if err != nil {
				break // the burst's echoes are in, or lost
			}
			if n < 4 {
				seen[n] = true // too short to say which it was: its size must be one that is
				if !slices.Contains(sizes, n) {
					t.Fatalf("an echo of %d bytes, not a size sent", n)
				}
				continue
			}
			seq := binary.BigEndian.Uint32(buf)
			if seq >= next || seq < last {
				t.Fatalf("echo of datagram %d after that of %d (sent up to %d): reordered or not one sent", seq, last-1, next-1)
			}
			if want := datagram(seq); !bytes.Equal(buf[:n], want) {
				t.Fatalf("datagram %d came back as %d bytes, not its %d", seq, n, len(want))
			}
			seen[n] = true
			last = seq + 1
		}
	}
	t.Logf("%d datagrams sent, each size echoed whole and in order", next)
}
