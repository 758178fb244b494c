//go:build unix

package tunnel_test

import (
	"context"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"plug/tunnel"
	"plug/tunnel/tunneltest"
)

// sinkServer reads and discards everything, then answers with one byte.
func sinkServer(tb testing.TB) string {
	return serveEach(tb, func(c net.Conn) {
		io.Copy(io.Discard, c)
		c.Write([]byte{1})
	})
}

// benchmarkSink sends 64 MiB per iteration to a sink through a connection
// dial opens, and waits for the sink's answer. Besides the rate it reports
// the CPU time (user + system) the process spent per GiB carried: both
// ends of the tunnel, and the sender and the sink, which cost the same
// whatever the tunnel does.
func benchmarkSink(b *testing.B, dial func() (net.Conn, error)) {
	chunk := make([]byte, 1<<20)
	b.SetBytes(int64(len(chunk)) * 64)
	b.ResetTimer()
	before := cpuSpent(b)
	defer func() {
		gib := float64(b.N) * float64(len(chunk)) * 64 / (1 << 30)
		b.ReportMetric((cpuSpent(b)-before).Seconds()/gib, "cpu-s/GiB")
	}()
	for range b.N {
		c, err := dial()
		if err != nil {
			b.Fatal(err)
		}
		for range 64 {
			if _, err := c.Write(chunk); err != nil {
				b.Fatal(err)
			}
		}
		c.(*net.TCPConn).CloseWrite()
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}

// cpuSpent is the user and system time of this process so far, from
// getrusage (which Windows does not have: this file is built on Unix only).
func cpuSpent(tb testing.TB) time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// BenchmarkServedName measures what a caller in the cluster sends to a
// developer's process through a served name: agent, SSH, client, local.
func BenchmarkServedName(b *testing.B) {
	platform := tunneltest.NewPlatform()
	addr, hostKey, _ := tunneltest.StartAgent(b, platform, func(a *tunnel.Agent) { a.Logf = func(string, ...any) {} })
	priv, _ := newKey(b)
	s, err := tunnel.Connect(context.Background(), tunnel.ClientConfig{Addr: addr, User: "dev", Signer: priv, HostKey: hostKey})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Serve(context.Background(), "sink", 80, sinkServer(b)); err != nil {
		b.Fatal(err)
	}
	benchmarkSink(b, func() (net.Conn, error) { return platform.DialContext(context.Background(), "tcp", "sink:80") })
}

// BenchmarkCarriedName measures what a developer's process sends to a
// name in the cluster: local, client, SSH, agent, workload. The agent is
// the receiving end of the SSH connection.
func BenchmarkCarriedName(b *testing.B) {
	platform := tunneltest.NewPlatform()
	platform.AddWorkload("sink:80", sinkServer(b))
	platform.SetNames(tunnel.ClusterName{Name: "sink", Ports: []int{80}})
	addr, hostKey, _ := tunneltest.StartAgent(b, platform, func(a *tunnel.Agent) { a.Logf = func(string, ...any) {} })
	priv, _ := newKey(b)
	s, err := tunnel.Connect(context.Background(), tunnel.ClientConfig{Addr: addr, User: "dev", Signer: priv, HostKey: hostKey})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	local := serveEach(b, func(c net.Conn) { s.Carry(context.Background(), c, "sink:80") })
	benchmarkSink(b, func() (net.Conn, error) { return net.Dial("tcp", local) })
}
