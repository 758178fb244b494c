package cli

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/tunnel"
	"plug/tunnel/tunneltest"
)

// TestARunsUDPFlowsAreBounded: each sender socket is a flow whose replies
// come back to it; past maxUDPFlows at once, a new sender's datagrams are
// dropped, and the flows already open go on.
func TestARunsUDPFlowsAreBounded(t *testing.T) {
	echo, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := echo.ReadFrom(buf)
			if err != nil {
				return
			}
			echo.WriteTo(buf[:n], from)
		}
	}()
	p := tunneltest.NewPlatform()
	p.AddWorkload("dns:53", echo.LocalAddr().String())
	p.SetNames(tunnel.ClusterName{Name: "dns", UDPPorts: []int{53}})
	addr, hostKey, _ := tunneltest.StartAgent(t, p)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := ssh.NewSignerFromKey(key)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := tunnel.Connect(ctx, tunnel.ClientConfig{Addr: addr, User: "dev", Signer: signer, HostKey: hostKey})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	var mu sync.Mutex
	var refusals []string
	ul, err := listenUDP(netip.MustParseAddr("127.0.0.1"), 0, s, "dns:53", "dns:53/udp", func(label string, err error) {
		mu.Lock()
		refusals = append(refusals, err.Error())
		mu.Unlock()
	}, newFlowBudget())
	if err != nil {
		t.Fatal(err)
	}
	defer ul.close()
	to := ul.flows.Conn().LocalAddr().String()
	ask := func(c net.Conn, msg string, within time.Duration) (string, error) {
		c.SetDeadline(time.Now().Add(within))
		c.Write([]byte(msg))
		buf := make([]byte, 2048)
		n, err := c.Read(buf)
		return string(buf[:n]), err
	}
	senders := make([]net.Conn, maxUDPFlows+1)
	for i := range senders {
		c, err := net.Dial("udp4", to)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		senders[i] = c
	}
	for i, c := range senders[:maxUDPFlows] {
		msg := strings.Repeat(string(rune('a'+i%26)), 1+i)
		if got, err := ask(c, msg, 5*time.Second); err != nil || got != msg {
			t.Fatalf("sender %d: %q, %v", i, got, err)
		}
	}
	if got, err := ask(senders[maxUDPFlows], "one too many", 300*time.Millisecond); err == nil {
		t.Fatalf("a sender past %d flows was answered: %q", maxUDPFlows, got)
	}
	if got, err := ask(senders[0], "still here", 5*time.Second); err != nil || got != "still here" {
		t.Fatalf("a flow already open, past the bound: %q, %v", got, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(refusals) > 0 {
		t.Fatalf("refusals: %v", refusals)
	}
}
