package tunnel_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// More runs than the agent lets into their handshake at once, from one
// address, all get in: the agent queues those over its cap, refuses with a
// word those over its queue, and the CLI tries those again, telling the
// developer once.
func TestABurstOverTheHandshakeCapFromOneAddressAllGetIn(t *testing.T) {
	var log lines
	addr, hostKey, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform(), func(a *tunnel.Agent) {
		a.Limits = tunnel.Limits{RunsPerKey: 1000, ConnsPerKey: 1000}
	}, agentLog(&log))
	// Idle connections hold the address's 32 handshake slots (they are
	// accepted first), so that the burst must wait and some of it is
	// refused, until they go.
	var idle []net.Conn
	for range 32 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	signer, _ := newKey(t)
	const burst = 100
	var wg sync.WaitGroup
	errs := make(chan error, burst)
	var told atomic.Int32
	for range burst {
		wg.Go(func() {
			var events lines
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, err := tunnel.Connect(ctx, tunnel.ClientConfig{Addr: addr, User: "dev", Signer: signer, HostKey: hostKey, Events: events.events})
			if err != nil {
				errs <- err
				return
			}
			s.Close()
			if n := strings.Count(events.String(), "the agent is busy (too many connections being set up from this address); trying again"); n > 0 {
				told.Add(1)
				if n > 1 {
					errs <- errors.New("a run said more than once that it tries again:\n" + events.String())
				}
			}
		})
	}
	clustertest.Eventually(t, clustertest.Settle, "the agent refusing part of the burst", func() error {
		if !log.has("refused a connection from 127.0.0.1") {
			return errors.New("no refusal logged")
		}
		return nil
	})
	for _, c := range idle {
		c.Close()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if told.Load() == 0 {
		t.Error("no run of the burst said that it tries again")
	}
}

// A refused key is not tried again: Connect fails with the refusal after
// one attempt, and says nothing of trying again.
func TestARefusedKeyIsNotTriedAgain(t *testing.T) {
	var log lines
	addr, hostKey, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform(), func(a *tunnel.Agent) {
		a.Keys = tunneltest.RefuseKeys("not accepted yet")
	}, agentLog(&log))
	signer, _ := newKey(t)
	var events lines
	_, err := tunnel.Connect(ctxFor(t, 20*time.Second), tunnel.ClientConfig{Addr: addr, User: "dev", Signer: signer, HostKey: hostKey, Events: events.events})
	var auth *tunnel.AuthError
	if !errors.As(err, &auth) {
		t.Fatalf("Connect with a refused key: %v", err)
	}
	if n := strings.Count(log.String(), "refused the key"); n != 1 {
		t.Errorf("the agent refused the key %d times, want once:\n%s", n, log.String())
	}
	if events.has("trying again") {
		t.Errorf("the run said it tries again:\n%s", events.String())
	}
}

// A connection closed without a word during the handshake (as an older
// agent over its cap does) is tried again.
func TestAConnectionClosedDuringTheHandshakeIsTriedAgain(t *testing.T) {
	agent, hostKey, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform())
	var conns atomic.Int32
	addr := serveEach(t, func(c net.Conn) {
		if conns.Add(1) == 1 {
			return // closed at once
		}
		up, err := net.Dial("tcp", agent)
		if err != nil {
			return
		}
		defer up.Close()
		go io.Copy(up, c)
		io.Copy(c, up)
	})
	signer, _ := newKey(t)
	_, events := connect(t, addr, hostKey, signer, tunnel.RunInfo{})
	if n := conns.Load(); n != 2 {
		t.Errorf("the run connected %d times, want twice", n)
	}
	if !events.has("the agent closed the connection during the SSH handshake; trying again") {
		t.Errorf("the run did not say it tries again:\n%s", events.String())
	}
}
