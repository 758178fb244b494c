package tunnel_test

import (
	"context"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"

	"plug/tunnel"
	"plug/tunnel/tunneltest"
)

// echoBytes answers each byte it reads with the same byte, until the test
// ends: what a small request/response protocol looks like to the tunnel.
func echoBytes(tb testing.TB) string {
	return serveEach(tb, func(c net.Conn) { io.Copy(c, c) })
}

// servedEcho starts an agent and a session serving "echo" at an echo
// server, and returns how a caller in the cluster dials it.
func servedEcho(tb testing.TB) func() (net.Conn, error) {
	platform := tunneltest.NewPlatform()
	addr, hostKey, _ := tunneltest.StartAgent(tb, platform, func(a *tunnel.Agent) { a.Logf = func(string, ...any) {} })
	priv, _ := newKey(tb)
	s, err := tunnel.Connect(context.Background(), tunnel.ClientConfig{Addr: addr, User: "dev", Signer: priv, HostKey: hostKey})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	if _, err := s.Serve(context.Background(), "echo", 80, echoBytes(tb)); err != nil {
		tb.Fatal(err)
	}
	return func() (net.Conn, error) { return platform.DialContext(context.Background(), "tcp", "echo:80") }
}

// BenchmarkServedNameRoundTrip measures one 64-byte request and its answer
// through a served name: caller, agent, SSH, client, local process, back.
func BenchmarkServedNameRoundTrip(b *testing.B) {
	c, err := servedEcho(b)()
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	msg := make([]byte, 64)
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, msg); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHeldConnections measures the memory each open, idle connection
// through a served name costs the agent and the client together.
func BenchmarkHeldConnections(b *testing.B) {
	const n = 1000
	dial := servedEcho(b)
	for range b.N {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		conns := make([]net.Conn, n)
		var wg sync.WaitGroup
		for i := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := dial()
				if err != nil {
					b.Error(err)
					return
				}
				msg := []byte{1}
				if _, err := c.Write(msg); err == nil {
					_, err = io.ReadFull(c, msg)
				}
				if err != nil {
					b.Error(err)
				}
				conns[i] = c
			}()
		}
		wg.Wait()
		runtime.GC()
		runtime.ReadMemStats(&after)
		inUse := func(m *runtime.MemStats) uint64 { return m.HeapInuse + m.StackInuse }
		b.ReportMetric(float64(inUse(&after)-inUse(&before))/n, "B/conn")
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}
}
