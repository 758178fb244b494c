package tunnel_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// clusterSender is a socket of a workload in the cluster that sends to
// address over UDP.
func clusterSender(t *testing.T, p *tunneltest.Platform, address string) net.Conn {
	t.Helper()
	c, err := p.DialContext(context.Background(), "udp", address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestAServedUDPPortReachesTheLocalListener: -s stats:8125:PORT/udp — the
// datagrams of each sender in the cluster reach the developer's UDP
// listener, and its replies go back to that sender, not another.
func TestAServedUDPPortReachesTheLocalListener(t *testing.T) {
	p := tunneltest.NewPlatform()
	addr, hostKey, _ := tunneltest.StartAgent(t, p)
	signer, _ := newKey(t)
	s, _ := connect(t, addr, hostKey, signer, tunnel.RunInfo{Serves: true})
	local := udpEchoServer(t, "laptop says ")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	served, err := s.ServeUDP(ctx, "stats", 8125, local)
	if err != nil {
		t.Fatal(err)
	}
	if b, ok := p.Held("stats"); !ok || !b.UDP || b.Port != 8125 {
		t.Fatalf("the platform holds %+v (%v), want stats:8125/udp; served %+v", b, ok, served)
	}
	a, b := clusterSender(t, p, "stats:8125"), clusterSender(t, p, "stats:8125")
	for i := range 20 {
		for _, c := range []struct {
			conn net.Conn
			name string
		}{{a, "a"}, {b, "b"}} {
			msg := fmt.Sprintf("%s %d %s", c.name, i, strings.Repeat("x", i*60))
			if got, err := exchange(c.conn, msg); err != nil || got != "laptop says "+msg {
				t.Fatalf("sender %s, datagram %d: %q, %v", c.name, i, got, err)
			}
		}
	}
	if _, err := s.ServeUDP(ctx, "stats", 8125, local); err == nil {
		t.Fatal("serving stats twice in one run was accepted")
	}
}

// TestUDPServeIsRefusedWhereThePlatformRefusesIt: a platform's refusal of
// a UDP binding reaches the developer as its text, and nothing is held.
func TestUDPServeIsRefusedWhereThePlatformRefusesIt(t *testing.T) {
	p := &refusingUDP{Platform: tunneltest.NewPlatform()}
	addr, hostKey, _ := tunneltest.StartAgent(t, p)
	signer, _ := newKey(t)
	s, _ := connect(t, addr, hostKey, signer, tunnel.RunInfo{Serves: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := s.ServeUDP(ctx, "stats", 8125, "127.0.0.1:8125")
	if err == nil || !strings.Contains(err.Error(), "no UDP here") {
		t.Fatalf("ServeUDP on a platform without UDP: %v", err)
	}
	if _, held := p.Held("stats"); held {
		t.Fatal("the refused name is held")
	}
}

type refusingUDP struct{ *tunneltest.Platform }

func (p *refusingUDP) Serve(ctx context.Context, b tunnel.Binding) (tunnel.Served, error) {
	if b.UDP {
		return tunnel.Served{}, tunnel.Refused(b.Name, "no UDP here")
	}
	return p.Platform.Serve(ctx, b)
}

// rawUDPServer is an SSH client of its own that serves stats:8125/udp and
// hands over the flows the agent opens to it, as a hostile client could.
func rawUDPServer(t *testing.T, addr string, hostKey ssh.PublicKey, signer ssh.Signer) <-chan ssh.NewChannel {
	t.Helper()
	conn, chans, reqs := sshFrom(t, addr, hostKey, signer)
	go ssh.DiscardRequests(reqs)
	ok, _, err := conn.SendRequest("datagram-forward@plug", true, ssh.Marshal(struct {
		Addr string
		Port uint32
	}{"stats", 8125}))
	if err != nil || !ok {
		t.Fatalf("datagram-forward: %v, %v", ok, err)
	}
	return chans
}

// TestAMalformedFrameOfAServedFlowClosesOnlyThatFlow: a run that answers
// a flow with a frame longer than a datagram loses that flow; its other
// flows go on.
func TestAMalformedFrameOfAServedFlowClosesOnlyThatFlow(t *testing.T) {
	p := tunneltest.NewPlatform()
	addr, hostKey, _ := tunneltest.StartAgent(t, p)
	signer, _ := newKey(t)
	chans := rawUDPServer(t, addr, hostKey, signer)
	accept := func(c net.Conn, msg string) ssh.Channel {
		c.Write([]byte(msg))
		select {
		case nc := <-chans:
			if nc.ChannelType() != "forwarded-datagram@plug" {
				t.Fatalf("the agent opened a %s channel", nc.ChannelType())
			}
			ch, reqs, err := nc.Accept()
			if err != nil {
				t.Fatal(err)
			}
			go ssh.DiscardRequests(reqs)
			return ch
		case <-time.After(clustertest.Settle):
			t.Fatal("no flow was opened for a sender")
			return nil
		}
	}
	frame := func(b []byte) []byte { return append(binary.BigEndian.AppendUint16(nil, uint16(len(b))), b...) }
	a, b := clusterSender(t, p, "stats:8125"), clusterSender(t, p, "stats:8125")
	bad, good := accept(a, "hello from a"), accept(b, "hello from b")
	for _, ch := range []struct {
		ch   ssh.Channel
		want string
	}{{bad, "hello from a"}, {good, "hello from b"}} {
		got := make([]byte, 2+len(ch.want))
		if _, err := io.ReadFull(ch.ch, got); err != nil || string(got) != string(frame([]byte(ch.want))) {
			t.Fatalf("the first datagram: %q, %v", got, err)
		}
	}
	bad.Write([]byte{0xff, 0xff, 1, 2, 3})
	done := make(chan error, 1)
	go func() { _, err := io.ReadAll(bad); done <- err }()
	select {
	case <-done:
	case <-time.After(clustertest.Settle):
		t.Fatal("the flow with a malformed frame stayed open")
	}
	good.Write(frame([]byte("still here")))
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 100)
	if n, err := b.Read(buf); err != nil || string(buf[:n]) != "still here" {
		t.Fatalf("the other flow: %q, %v", buf[:n], err)
	}
}

// TestAFloodOfSendersToAServedUDPPortIsCappedPerKey: each sender is one
// of the serving key's channels; past the cap, a new sender's datagrams
// are dropped, the flows already open go on, and the agent logs the cap.
func TestAFloodOfSendersToAServedUDPPortIsCappedPerKey(t *testing.T) {
	p := tunneltest.NewPlatform()
	var logs lines
	addr, hostKey, _ := tunneltest.StartAgent(t, p, func(a *tunnel.Agent) {
		a.Limits = tunnel.Limits{ChannelsPerKey: 3}
		a.Logf = func(format string, args ...any) { logs.events(tunnel.Event{Text: fmt.Sprintf(format, args...)}) }
	})
	signer, _ := newKey(t)
	s, _ := connect(t, addr, hostKey, signer, tunnel.RunInfo{Serves: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.ServeUDP(ctx, "stats", 8125, udpEchoServer(t, "")); err != nil {
		t.Fatal(err)
	}
	senders := make([]net.Conn, 4)
	for i := range senders {
		senders[i] = clusterSender(t, p, "stats:8125")
	}
	for i, c := range senders[:3] {
		if got, err := exchange(c, "flow"); err != nil || got != "flow" {
			t.Fatalf("sender %d: %q, %v", i, got, err)
		}
	}
	senders[3].SetDeadline(time.Now().Add(300 * time.Millisecond))
	senders[3].Write([]byte("one too many"))
	if n, err := senders[3].Read(make([]byte, 100)); err == nil {
		t.Fatalf("a fourth sender past the cap of 3 was answered (%d bytes)", n)
	}
	if got, err := exchange(senders[0], "still here"); err != nil || got != "still here" {
		t.Fatalf("a flow already open, past the cap: %q, %v", got, err)
	}
	clustertest.Eventually(t, clustertest.Settle, "the agent's log of the cap", func() error {
		if !logs.has("PLUG_MAX_CHANNELS_PER_KEY") {
			return fmt.Errorf("it logged:\n%s", logs.String())
		}
		return nil
	})
}
