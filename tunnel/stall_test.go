package tunnel_test

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// sinkPlatform is the in-memory platform whose name "sink" accepts
// connections and never reads them (a service that stopped reading): its
// connections are in-process pipes, which take nothing until read. Other
// names are dialled as tunneltest.Platform dials them.
type sinkPlatform struct {
	*tunneltest.Platform
	mu    sync.Mutex
	held  []net.Conn
	dials atomic.Int32
}

func (p *sinkPlatform) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if !strings.HasPrefix(address, "sink:") {
		return p.Platform.DialContext(ctx, network, address)
	}
	mine, theirs := net.Pipe()
	p.mu.Lock()
	p.held = append(p.held, theirs)
	p.mu.Unlock()
	p.dials.Add(1)
	return mine, nil
}

// One key opens 100 connections to a service that takes nothing and sends
// 2 MiB into each, filling the agent's window of each channel: once their
// writes have been stalled for a second, each is counted as 2 MiB of the
// key's PLUG_MAX_MEMORY_PER_KEY (64 MiB), and those past it are ended,
// logged with the cap named; the heap settles within the key's budget
// (and the test's client side) of idle, and another key's run dials
// through the agent. (An agent without this held the 200 MiB for as long
// as the connections stayed open.)
func TestConnectionsWhoseFarEndDoesNotReadAreEndedPastTheKeysBudget(t *testing.T) {
	const conns, perConn = 100, 2 << 20
	platform := &sinkPlatform{Platform: tunneltest.NewPlatform()}
	platform.AddWorkload("web:80", echoServer(t, "web says "))
	platform.SetNames(tunnel.ClusterName{Name: "web", Ports: []int{80}}, tunnel.ClusterName{Name: "sink", Ports: []int{80}})
	t.Cleanup(func() {
		for _, c := range platform.held {
			c.Close()
		}
	})
	var log lines
	addr, hostKey, _ := tunneltest.StartAgent(t, platform, func(a *tunnel.Agent) {
		a.Logf = func(format string, args ...any) { log.events(tunnel.Event{Text: fmt.Sprintf(format, args...)}) }
	})
	other, _ := newKey(t)
	bystander, _ := connect(t, addr, hostKey, other, tunnel.RunInfo{})
	runtime.GC()
	idle := heapHeld()

	key, _ := newKey(t)
	conn, chans, reqs := sshFrom(t, addr, hostKey, key) // a plain client: one channel a connection
	client := ssh.NewClient(conn, chans, reqs)
	var ended atomic.Int32
	block := make([]byte, 32<<10)
	for range conns {
		c, err := client.Dial("tcp", "sink:80")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		go func() {
			for sent := 0; sent < 4*perConn; sent += len(block) { // more than the window: it blocks
				if _, err := c.Write(block); err != nil {
					break
				}
			}
			// The agent ends the connection: reading sees it.
			if _, err := c.Read(make([]byte, 1)); err != nil {
				ended.Add(1)
			}
		}()
	}
	clustertest.Eventually(t, clustertest.Settle, "the connections past the key's budget to be ended", func() error {
		if n := ended.Load(); n < conns-32 {
			return fmt.Errorf("%d of %d ended", n, conns)
		}
		return nil
	})
	if n := ended.Load(); n > conns-32+2 {
		t.Errorf("%d of %d connections ended, want those past the 32 that 64 MiB holds", n, conns)
	}
	if !log.has("PLUG_MAX_MEMORY_PER_KEY") {
		t.Errorf("the agent did not log the cap; it logged:\n%s", log.String())
	}
	if err := echoOnce(func() (net.Conn, error) { return bystander.Dial(context.Background(), "web:80") }, "web says "); err != nil {
		t.Errorf("another key's run: %v", err)
	}
	clustertest.Eventually(t, 30*time.Second, "the heap within the key's budget of idle", func() error {
		// The key's 64 MiB, and this process's client side of the 32
		// connections left (their blocked writes).
		if h := heapHeld(); h > idle+(64+32)<<20 {
			return fmt.Errorf("it holds %d MiB, idle %d MiB", h>>20, idle>>20)
		}
		return nil
	})
	t.Logf("%d connections to a service that reads nothing, 2 MiB sent into each: %d ended at the key's budget; heap held %d MiB, idle %d MiB", conns, ended.Load(), heapHeld()>>20, idle>>20)
}
