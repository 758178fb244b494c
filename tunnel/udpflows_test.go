package tunnel_test

import (
	"bytes"
	"net"
	"testing"
	"time"

	"plug/tunnel"
)

// TestDatagramFlowsSplitSendersAndKeepToTheBudget: each sender is one
// flow, answered on its own; past the budget a new sender is not heard,
// and a flow that ends gives its place to the next.
func TestDatagramFlowsSplitSendersAndKeepToTheBudget(t *testing.T) {
	pc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	// Each flow answers with its first datagram, whatever it is sent
	// next, and ends when sent "bye".
	flows := tunnel.NewDatagramFlows(pc, &tunnel.FlowCap{Max: 2}, func(f net.Conn) {
		defer f.Close()
		buf := make([]byte, 100)
		n, err := f.Read(buf)
		first := string(buf[:n])
		for err == nil {
			if string(buf[:n]) == "bye" {
				return
			}
			f.Write([]byte(first))
			n, err = f.Read(buf)
		}
	})
	defer flows.Close()
	send := func(c net.Conn, msg string, within time.Duration) (string, error) {
		c.SetDeadline(time.Now().Add(within))
		c.Write([]byte(msg))
		buf := make([]byte, 100)
		n, err := c.Read(buf)
		return string(buf[:n]), err
	}
	var senders []net.Conn
	for range 3 {
		c, err := net.Dial("udp4", pc.LocalAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		senders = append(senders, c)
	}
	for i, name := range []string{"a", "b"} {
		if got, err := send(senders[i], name, 5*time.Second); err != nil || got != name {
			t.Fatalf("sender %s: %q, %v", name, got, err)
		}
	}
	if got, err := send(senders[0], "again", 5*time.Second); err != nil || got != "a" {
		t.Fatalf("sender a's second datagram went to another flow: %q, %v", got, err)
	}
	if got, err := send(senders[2], "c", 300*time.Millisecond); err == nil {
		t.Fatalf("a third sender past a budget of 2 was answered: %q", got)
	}
	senders[1].Write([]byte("bye"))
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := send(senders[2], "c", 200*time.Millisecond)
		if err == nil {
			if got != "c" {
				t.Fatalf("the third sender, once b ended: %q", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the third sender found no room once b's flow ended: %v", err)
		}
	}
}

// TestAFlowCapHoldsItsBytesCap: the bytes waiting in the flows of one
// FlowCap stay within MaxQueued; what is released makes room again.
func TestAFlowCapHoldsItsBytesCap(t *testing.T) {
	c := &tunnel.FlowCap{Max: 4, MaxQueued: 3000}
	for i, n := range []int{1000, 1500, 500} {
		if !c.Hold(n) {
			t.Fatalf("datagram %d of %d bytes refused within 3000", i, n)
		}
	}
	if c.Hold(1) {
		t.Fatal("a byte past 3000 was held")
	}
	c.Release(1500)
	if !c.Hold(1500) || c.Hold(1) {
		t.Fatal("the room of a released datagram was not given back exactly")
	}
}

// TestAFlowsLargeDatagramsArriveWholeReadAfterRead: datagrams large
// enough to wait in the buffer they were read into, which is read into
// again once the flow has taken them, arrive whole and in order, one
// after another, as many as the buffers are used again.
func TestAFlowsLargeDatagramsArriveWholeReadAfterRead(t *testing.T) {
	pc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte)
	flows := tunnel.NewDatagramFlows(pc, &tunnel.FlowCap{Max: 1}, func(f net.Conn) {
		defer f.Close()
		buf := make([]byte, tunnel.MaxDatagram)
		for {
			n, err := f.Read(buf)
			if err != nil {
				return
			}
			got <- bytes.Clone(buf[:n])
		}
	})
	defer flows.Close()
	c, err := net.Dial("udp4", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 20 {
		d := bytes.Repeat([]byte{byte(i + 1)}, 40000+i)
		if _, err := c.Write(d); err != nil {
			t.Fatal(err)
		}
		select {
		case b := <-got:
			if !bytes.Equal(b, d) {
				t.Fatalf("datagram %d arrived as %d bytes of %v, not its %d of %d", i, len(b), b[:min(len(b), 1)], len(d), i+1)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("datagram %d did not arrive in 5s", i)
		}
	}
}
