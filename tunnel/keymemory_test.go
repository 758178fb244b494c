package tunnel_test

import (
	"context"
	"errors"
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

// heapHeld is what the process's heap holds from the system, in bytes:
// what it uses and what it freed but has not given back.
func heapHeld() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapSys - m.HeapReleased
}

// heapPeak samples heapHeld every 50 ms until stop is called, which
// returns the highest it saw. over, when the heap passes limit, is
// called once (to end what fills it, so that a failing agent does not take
// the machine's memory).
func heapPeak(limit uint64, over func()) (stop func() uint64) {
	done := make(chan struct{})
	var peak atomic.Uint64
	var overOnce sync.Once
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			h := heapHeld()
			if h > peak.Load() {
				peak.Store(h)
			}
			if h > limit {
				overOnce.Do(over)
			}
			select {
			case <-tick.C:
			case <-done:
				return
			}
		}
	}()
	return sync.OnceValue(func() uint64 { close(done); return peak.Load() })
}

// sshFrom is a plain SSH connection of signer to the agent at addr.
func sshFrom(t *testing.T, addr string, hostKey ssh.PublicKey, signer ssh.Signer) (ssh.Conn, <-chan ssh.NewChannel, <-chan *ssh.Request) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn, chans, reqs, err := ssh.NewClientConn(nc, addr, &ssh.ClientConfig{User: "dev", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: ssh.FixedHostKey(hostKey), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, chans, reqs
}

// keyBudget is what one key may make the agent's heap hold, above idle,
// and settled how close to idle the heap must come back once it has gone.
const (
	keyBudget = 128 << 20
	settled   = 20 << 20
)

// One key asks for 1,000 session channels that never ask for a shell and
// writes 2 MiB into each it gets, and serves a UDP port whose 64 flows it
// never takes while senders in the cluster send 260 datagrams of 64 KB to
// each: the agent's heap stays within keyBudget of idle, another key's
// run dials through the agent all along, and once the key has gone the
// heap comes back within 20 MiB of idle in 30 s. (The agent of this
// version lets a key have 8 sessions, reads them from their opening, and
// queues a flow's datagrams up to 2 MiB and its key's MemoryPerKey; one
// that did none of that held some 2 GiB and 1 GiB.)
func TestOneKeyCannotMakeTheAgentHoldMoreThanItsBudget(t *testing.T) {
	const sessions, perSession, flows, datagrams, datagramSize = 1000, 2 << 20, 64, 260, 64000
	platform := tunneltest.NewPlatform()
	platform.AddWorkload("web:80", echoServer(t, "web says "))
	platform.SetNames(tunnel.ClusterName{Name: "web", Ports: []int{80}})
	addr, hostKey, _ := tunneltest.StartAgent(t, platform, func(a *tunnel.Agent) {
		a.Limits = tunnel.Limits{ChannelsPerKey: sessions + flows}
		a.Logf = func(string, ...any) {}
	})
	other, _ := newKey(t)
	bystander, _ := connect(t, addr, hostKey, other, tunnel.RunInfo{})
	expectEcho(t, func() (net.Conn, error) { return bystander.Dial(context.Background(), "web:80") }, "web says ")

	runtime.GC()
	idle := heapHeld()
	flooder, _ := newKey(t)
	sessionConn, _, sreqs := sshFrom(t, addr, hostKey, flooder)
	go ssh.DiscardRequests(sreqs)
	udpConn, _, ureqs := sshFrom(t, addr, hostKey, flooder) // the flows' channels it is offered are never taken
	go ssh.DiscardRequests(ureqs)
	if ok, _, err := udpConn.SendRequest("datagram-forward@plug", true, ssh.Marshal(struct {
		Addr string
		Port uint32
	}{"stats", 8125})); err != nil || !ok {
		t.Fatalf("datagram-forward: %v, %v", ok, err)
	}
	ctx, stopFlood := context.WithCancel(context.Background())
	defer stopFlood()
	peak := heapPeak(idle+keyBudget, func() {
		t.Errorf("the agent's heap passed %d MiB above idle; stopping the flood", keyBudget>>20)
		stopFlood()
		sessionConn.Close()
		udpConn.Close()
	})
	defer peak()

	// Bystander: dials through the agent every 200 ms, each within 5 s.
	bystanderDone := make(chan error, 1)
	go func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				bystanderDone <- nil
				return
			case <-tick.C:
			}
			if err := echoOnce(func() (net.Conn, error) { return bystander.Dial(context.Background(), "web:80") }, "web says "); err != nil {
				bystanderDone <- err
				return
			}
		}
	}()

	// UDP: 64 senders, each its own flow, each a datagram every 2 ms (as
	// fast as the agent's socket takes them on this machine's 2 cores; a
	// faster sender only has more dropped by the kernel), for at least
	// datagrams each and 5 s.
	var senders sync.WaitGroup
	var sent atomic.Int64
	payload := make([]byte, datagramSize)
	floodFor, floodOver := context.WithTimeout(ctx, 5*time.Second)
	defer floodOver()
	for range flows {
		c := clusterSender(t, platform, "stats:8125")
		senders.Go(func() {
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			for n := 0; n < datagrams || floodFor.Err() == nil; n++ {
				if ctx.Err() != nil {
					return
				}
				if _, err := c.Write(payload); err == nil {
					sent.Add(1)
				}
				<-tick.C
			}
		})
	}

	// Sessions: 1,000 asked for, 2 MiB into each one opened, 8 writers at
	// once.
	chans := make(chan ssh.Channel, sessions)
	refused := 0
	for range sessions {
		ch, reqs, err := sessionConn.OpenChannel("session", nil)
		var rejected *ssh.OpenChannelError
		switch {
		case errors.As(err, &rejected) && strings.Contains(rejected.Message, "cap of 8 session channels (shells, commands) open for one key"):
			refused++
			continue
		case err != nil:
			if ctx.Err() == nil {
				t.Fatalf("opening session channels: %v", err)
			}
		default:
			go ssh.DiscardRequests(reqs)
			chans <- ch
			continue
		}
		break
	}
	opened := len(chans)
	close(chans)
	var writers sync.WaitGroup
	block := make([]byte, 32<<10)
	for range 8 {
		writers.Go(func() {
			for ch := range chans {
				for sent := 0; sent < perSession && ctx.Err() == nil; sent += len(block) {
					if _, err := ch.Write(block); err != nil {
						return
					}
				}
			}
		})
	}
	writers.Wait()
	senders.Wait()
	stopFlood()
	if err := <-bystanderDone; err != nil {
		t.Errorf("another key's run, during the flood: %v", err)
	}
	top := peak()
	t.Logf("heap held: idle %d MiB, peak %d MiB with %d session channels asked for (%d opened, %d refused at the cap) of %d MiB and %d UDP flows sent %d datagrams of %d B (budget: %d MiB above idle)",
		idle>>20, top>>20, sessions, opened, refused, perSession>>20, flows, sent.Load(), datagramSize, keyBudget>>20)
	if opened+refused != sessions {
		t.Errorf("of %d session channels, %d were opened and %d refused naming the cap", sessions, opened, refused)
	}
	if top > idle+keyBudget {
		t.Errorf("the agent's heap held %d MiB at its peak, more than %d MiB above its idle %d MiB", top>>20, keyBudget>>20, idle>>20)
	}

	sessionConn.Close()
	udpConn.Close()
	gone := time.Now()
	clustertest.Eventually(t, 30*time.Second, "the heap back within 20 MiB of idle once the key has gone", func() error {
		if h := heapHeld(); h > idle+settled {
			return fmt.Errorf("it holds %d MiB, idle %d MiB", h>>20, idle>>20)
		}
		return nil
	})
	t.Logf("the heap was back within %d MiB of idle %s after the key had gone", settled>>20, time.Since(gone).Round(time.Second))
	expectEcho(t, func() (net.Conn, error) { return bystander.Dial(context.Background(), "web:80") }, "web says ")
}
