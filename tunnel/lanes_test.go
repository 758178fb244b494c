package tunnel_test

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/tunnel"
	"plug/tunnel/tunneltest"
)

// laneOneWay is the delay each way of the line the lane tests run a
// session through: a 20 ms round trip, over which the CLI opens lanes.
const laneOneWay = 10 * time.Millisecond

// runThroughLine starts an agent on p and a run of run's kind connected to
// it through a 20 ms delay line, with an agent tweaked by opts.
func runThroughLine(t *testing.T, p *tunneltest.Platform, run tunnel.RunInfo, opts ...func(*tunnel.Agent)) (*tunnel.Session, *tunneltest.Line) {
	t.Helper()
	addr, hostKey, _ := tunneltest.StartAgent(t, p, opts...)
	line := tunneltest.NewLine(t, addr, laneOneWay)
	signer, _ := newKey(t)
	s, _ := connect(t, line.Addr, hostKey, signer, run)
	return s, line
}

// waitLanes waits until line has passed the run's connection and its 3
// lanes.
func waitLanes(t *testing.T, line *tunneltest.Line) {
	t.Helper()
	waitConns(t, line, 4)
}

// waitConns waits until line has passed n connections.
func waitConns(t *testing.T, line *tunneltest.Line, n int) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(10 * time.Second); line.Conns() < n; <-tick.C {
		if time.Now().After(deadline) {
			t.Fatalf("the run made %d connections through a 20 ms round trip, want %d", line.Conns(), n)
		}
	}
}

// echoedWhileHeld holds the run's own connection (the line's first) and
// sends n numbered datagrams on c, one every 2 ms, to an echo through the
// run; it returns how many came back while the connection was held (until
// 300 ms after the last was sent), then releases it and reads the rest,
// and reports whether all n came back.
func echoedWhileHeld(t *testing.T, line *tunneltest.Line, c net.Conn, n int) (whileHeld int, all bool) {
	t.Helper()
	drain(c)
	release := line.Hold(0)
	seen := map[uint32]bool{}
	read := func(until time.Time) {
		buf := make([]byte, 2048)
		for {
			c.SetReadDeadline(until)
			m, err := c.Read(buf)
			if err != nil {
				return
			}
			if m == 64 {
				seen[binary.BigEndian.Uint32(buf)] = true
			}
		}
	}
	msg := make([]byte, 64)
	for i := range n {
		binary.BigEndian.PutUint32(msg, uint32(i))
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		read(time.Now().Add(2 * time.Millisecond))
	}
	read(time.Now().Add(300 * time.Millisecond))
	whileHeld = len(seen)
	release()
	for deadline := time.Now().Add(5 * time.Second); len(seen) < n && time.Now().Before(deadline); {
		read(time.Now().Add(100 * time.Millisecond))
	}
	return whileHeld, len(seen) == n
}

// drain reads what waits on c.
func drain(c net.Conn) {
	buf := make([]byte, 2048)
	for {
		c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

// expectLanesCarry starts a flow on c and waits for the run's lanes, then
// sends datagrams through c while the run's own connection is held, until
// some come back through the lanes: at least a quarter of 40 (on the run's
// connection alone none would, until it is released); and every one once
// it is released.
func expectLanesCarry(t *testing.T, line *tunneltest.Line, c net.Conn) {
	t.Helper()
	if _, err := c.Write([]byte("first")); err != nil {
		t.Fatal(err)
	}
	waitLanes(t, line)
	const n = 40
	best := 0
	for try := 0; try < 5; try++ { // the lanes' channels may still be joining the flow
		held, all := echoedWhileHeld(t, line, c, n)
		if !all {
			t.Fatalf("only some of %d datagrams came back once the run's connection was released", n)
		}
		best = max(best, held)
		if held >= n/4 {
			t.Logf("%d of %d came back while the run's own connection was held", held, n)
			return
		}
	}
	t.Fatalf("while the run's own connection was held, at most %d of %d datagrams came back through its lanes, want %d or more", best, n, n/4)
}

// TestAConsumedFlowGoesOnOverLanesWhileTheRunsConnectionIsHeld: over a
// 20 ms round trip, a run that carries a UDP flow opens 3 lanes, and while
// its own connection is held up (as TCP holds what is behind a lost
// segment) the flow's datagrams still cross on them.
func TestAConsumedFlowGoesOnOverLanesWhileTheRunsConnectionIsHeld(t *testing.T) {
	p := tunneltest.NewPlatform()
	p.AddWorkload("echo:7", udpEchoServer(t, ""))
	p.SetNames(tunnel.ClusterName{Name: "echo", UDPPorts: []int{7}})
	s, line := runThroughLine(t, p, tunnel.RunInfo{})
	expectLanesCarry(t, line, localFlows(t, s, "echo:7"))
}

// TestAServedFlowGoesOnOverLanesWhileTheRunsConnectionIsHeld is the same
// for a flow the agent opens: a pod's datagrams to a UDP name the run
// serves.
func TestAServedFlowGoesOnOverLanesWhileTheRunsConnectionIsHeld(t *testing.T) {
	p := tunneltest.NewPlatform()
	s, line := runThroughLine(t, p, tunnel.RunInfo{Serves: true})
	if _, err := s.ServeUDP(context.Background(), "stats", 8125, udpEchoServer(t, "")); err != nil {
		t.Fatal(err)
	}
	expectLanesCarry(t, line, clusterSender(t, p, "stats:8125"))
}

// TestOnlyTheRunsOwnKeyMakesALaneAndALaneCarriesNothingElse: the lane
// token opens no lane for another key, nor a wrong token for the same
// key; a lane takes no channel but a flow's, and a run's connection takes
// no lane channel.
func TestOnlyTheRunsOwnKeyMakesALaneAndALaneCarriesNothingElse(t *testing.T) {
	p := tunneltest.NewPlatform()
	addr, hostKey, _ := tunneltest.StartAgent(t, p)
	signer, _ := newKey(t)
	s, _ := connect(t, addr, hostKey, signer, tunnel.RunInfo{})
	token := s.LaneToken()
	if len(token) < 32 {
		t.Fatalf("lane token %q: want 32 hex digits or more", token)
	}
	dial := func(key ssh.Signer) *ssh.Client {
		c, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{User: "dev", Auth: []ssh.AuthMethod{ssh.PublicKeys(key)}, HostKeyCallback: ssh.FixedHostKey(hostKey)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ask := func(c *ssh.Client, token string) bool {
		ok, _, _ := c.SendRequest(tunnel.LaneRequest, true, ssh.Marshal(struct{ Token string }{token}))
		return ok
	}
	other, _ := newKey(t)
	if ask(dial(other), token) {
		t.Error("another key made a lane of the run's connection with its token")
	}
	if ask(dial(signer), token+"0") {
		t.Error("a wrong token made a lane")
	}
	lane := dial(signer)
	if !ask(lane, token) {
		t.Fatal("the run's own key could not make a lane with its token")
	}
	for _, typ := range []string{"direct-tcpip", "session", "datagram@plug", "control@plug"} {
		if ch, _, err := lane.OpenChannel(typ, nil); err == nil {
			ch.Close()
			t.Errorf("a lane took a %s channel", typ)
		}
	}
	if ok, _, _ := lane.SendRequest("tcpip-forward", true, ssh.Marshal(struct {
		Addr string
		Port uint32
	}{"web", 80})); ok {
		t.Error("a lane took a tcpip-forward request")
	}
	if ch, _, err := lane.OpenChannel(tunnel.LaneJoinType, ssh.Marshal(struct{ ID uint32 }{1})); err == nil {
		ch.Close()
		t.Error("a lane joined a flow that does not exist")
	}
	run := dial(signer)
	if ch, _, err := run.OpenChannel(tunnel.LaneJoinType, ssh.Marshal(struct{ ID uint32 }{1})); err == nil {
		ch.Close()
		t.Error("a connection that is not a lane took a lane channel")
	}
	if ask(dial(signer), token) && ask(dial(signer), token) && ask(dial(signer), token) {
		t.Error("the run's connection took more than 3 lanes")
	}
}

// TestALaneThatEndsEndsNothingElse: when lanes' connections end, the
// flows they carried go on over the run's connection: the same flow, from
// the same socket of the agent, keeps answering.
func TestALaneThatEndsEndsNothingElse(t *testing.T) {
	p := tunneltest.NewPlatform()
	p.AddWorkload("echo:7", senderEcho(t))
	p.SetNames(tunnel.ClusterName{Name: "echo", UDPPorts: []int{7}})
	s, line := runThroughLine(t, p, tunnel.RunInfo{})
	c := localFlows(t, s, "echo:7")
	ask := func() string { // a datagram on a lane as it ends may be lost, as on a link that went down: asked again
		t.Helper()
		buf := make([]byte, 256)
		for try := 0; try < 3; try++ {
			if _, err := c.Write([]byte("who")); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(time.Second))
			if n, err := c.Read(buf); err == nil {
				return string(buf[:n])
			}
		}
		t.Fatal("no answer to 3 datagrams")
		return ""
	}
	before := ask()
	expectLanesCarry(t, line, c)
	if got := ask(); got != before {
		t.Fatalf("the flow's socket at the agent changed from %s to %s while its lanes joined it", before, got)
	}
	for lane := 1; lane <= 3; lane++ {
		line.Cut(lane)
	}
	for i := range 30 {
		if got := ask(); got != before {
			t.Fatalf("answer %d after a lane ended: %q, want %q (the flow's socket at the agent)", i, got, before)
		}
	}
}

// senderEcho answers on 127.0.0.1 a datagram "who" with the address it
// came from and any other with itself, and returns its address.
func senderEcho(t *testing.T) string {
	return udpServer(t, func(d []byte, from net.Addr) []byte {
		if string(d) == "who" {
			return []byte(from.String())
		}
		return d
	})
}

// TestAFlowGoesOnWithoutLanesWhereTheKeysCapRefusesThem: an agent whose
// cap of SSH connections per key leaves no room for a lane refuses it,
// and the flow goes on over the run's own connection.
func TestAFlowGoesOnWithoutLanesWhereTheKeysCapRefusesThem(t *testing.T) {
	p := tunneltest.NewPlatform()
	p.AddWorkload("echo:7", senderEcho(t))
	p.SetNames(tunnel.ClusterName{Name: "echo", UDPPorts: []int{7}})
	s, line := runThroughLine(t, p, tunnel.RunInfo{}, func(a *tunnel.Agent) { a.Limits = tunnel.Limits{ConnsPerKey: 1} })
	c := localFlows(t, s, "echo:7")
	buf := make([]byte, 256)
	for i := range 20 {
		if _, err := c.Write([]byte("who")); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Read(buf); err != nil {
			t.Fatalf("datagram %d: no answer (%d connections made through the line): %v", i, line.Conns(), err)
		}
		if i == 0 {
			waitConns(t, line, 2) // the run's and the lane the agent refused
		}
	}
	if n := line.Conns(); n != 2 {
		t.Fatalf("the run made %d connections, want its own and one lane, refused", n)
	}
}

// TestALaneHeldBackInSendingStillBringsTheFlowsReplies: while one lane's
// sending is held back — the line stops reading it, so its writes back up
// in the system, as a TCP connection's do while its congestion control
// probes the round trip — the echoes that come back on that lane still
// arrive. Its reader gives the sender its window back with writes of the
// same connection: they must not wait behind the lane's held data. Only
// what the lane took before it was held waits, and comes once it is let
// go.
func TestALaneHeldBackInSendingStillBringsTheFlowsReplies(t *testing.T) {
	p := tunneltest.NewPlatform()
	p.AddWorkload("echo:7", udpEchoServer(t, ""))
	p.SetNames(tunnel.ClusterName{Name: "echo", UDPPorts: []int{7}})
	s, line := runThroughLine(t, p, tunnel.RunInfo{})
	c := localFlows(t, s, "echo:7")
	expectLanesCarry(t, line, c)
	drain(c)

	// 3,000 datagrams of 1,200 bytes in 1.5 s: each lane's share backs up
	// past what the system holds for a connection that is not read.
	const n, size = 3000, 1200
	var mu sync.Mutex
	seen := map[uint32]bool{}
	echoed := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }
	c.SetReadDeadline(time.Time{}) // drain's has passed
	go func() {
		buf := make([]byte, 2*size)
		for {
			m, err := c.Read(buf)
			if err != nil {
				return
			}
			if m == size {
				mu.Lock()
				seen[binary.BigEndian.Uint32(buf)] = true
				mu.Unlock()
			}
		}
	}()
	// waitEchoed waits until want have come back, for at most within, and
	// returns how many have.
	waitEchoed := func(want int, within time.Duration) int {
		poll := time.NewTicker(10 * time.Millisecond)
		defer poll.Stop()
		for deadline := time.Now().Add(within); echoed() < want && time.Now().Before(deadline); <-poll.C {
		}
		return echoed()
	}
	release := sync.OnceFunc(line.Stall(1)) // the first lane's
	defer release()
	msg := make([]byte, size)
	tick := time.NewTicker(500 * time.Microsecond)
	for i := range uint32(n) {
		<-tick.C
		binary.BigEndian.PutUint32(msg, i)
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
	}
	tick.Stop()
	want := n * 4 / 5
	whileHeld := waitEchoed(want, time.Second) // 50 round trips of the line
	release()
	if all := waitEchoed(n, 10*time.Second); all < n {
		t.Fatalf("%d of %d datagrams came back once the lane was let go", all, n)
	}
	t.Logf("%d of %d came back while a lane's sending was held back", whileHeld, n)
	if whileHeld < want {
		t.Fatalf("while a lane's sending was held back, %d of %d datagrams came back, want %d or more: the replies on that lane waited behind its held data", whileHeld, n, want)
	}
}
