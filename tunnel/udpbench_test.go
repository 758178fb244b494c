//go:build unix

package tunnel_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"plug/tunnel"
	"plug/tunnel/tunneltest"
)

// runEcho is a UDP echo on 127.0.0.1 that reads and answers datagrams in
// runs, as plug's sockets do (tunnel.DatagramRuns), each sender a flow;
// it returns its address.
func runEcho(tb testing.TB) string {
	tb.Helper()
	pc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	flows := tunnel.NewDatagramFlows(pc, &tunnel.FlowCap{Max: 16}, func(f net.Conn) {
		tunnel.NewDatagramRuns(f).Echo()
		f.Close()
	})
	tb.Cleanup(func() { flows.Close() })
	return pc.LocalAddr().String()
}

// udpWindow is how many datagrams benchmarkEchoes keeps in flight on
// loopback: 1.2 MB, well within one channel window each way and a UDP
// socket's buffer.
const udpWindow = 1024

// benchmarkEchoes sends b.N datagrams of 1,200 bytes on c to an echo,
// window in flight, each run of free places in one write, and reports
// the echoes' rate (Mbit/s and datagrams/s each way: both directions
// carry that at once), the share lost (not echoed within 200 ms) and the
// CPU time the process spent per GiB echoed (both ends of the tunnel, the
// sender and the echo).
func benchmarkEchoes(b *testing.B, c *net.UDPConn, window int) {
	runs := tunnel.NewDatagramRuns(c)
	const size = 1200
	payload := make([]byte, 64*size)
	msgs := make([][]byte, 64)
	for i := range msgs {
		msgs[i] = payload[i*size : (i+1)*size]
	}
	echoed, lost, inFlight := 0, 0, 0
	b.ResetTimer()
	before := cpuSpent(b)
	start := time.Now()
	for sent := 0; sent < b.N || inFlight > 0; {
		for inFlight < window && sent < b.N {
			n := min(len(msgs), window-inFlight, b.N-sent)
			if err := runs.Send(msgs[:n]...); err != nil {
				b.Fatal(err)
			}
			sent += n
			inFlight += n
		}
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		err := runs.Receive(func(d []byte) {
			if len(d) == size {
				echoed++
				inFlight--
			}
		})
		if errors.Is(err, os.ErrDeadlineExceeded) {
			lost += inFlight // those in flight are given up on
			inFlight = 0
		} else if err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	b.ReportMetric(float64(echoed)*size*8/elapsed.Seconds()/1e6, "Mbit/s")
	b.ReportMetric(float64(echoed)/elapsed.Seconds(), "datagrams/s")
	b.ReportMetric(100*float64(lost)/float64(b.N), "%lost")
	if echoed > 0 {
		b.ReportMetric((cpuSpent(b)-before).Seconds()/(float64(echoed)*size/(1<<30)), "cpu-s/GiB")
	}
	binary.BigEndian.PutUint64(payload, uint64(echoed)) // payload is used
}

// BenchmarkCarriedUDPName: a local program's datagrams to a name's UDP
// port in the cluster and back, as a run carries them (DatagramFlows,
// CarryDatagrams, the agent's socket to the workload): compare with
// BenchmarkCarriedName, one way of TCP.
func BenchmarkCarriedUDPName(b *testing.B) { benchmarkCarriedUDP(b, 0, udpWindow) }

// benchmarkCarriedUDP measures a carried UDP name with window datagrams
// in flight, the SSH connection through a round trip of twice delay (0:
// straight).
func benchmarkCarriedUDP(b *testing.B, delay time.Duration, window int) {
	p := tunneltest.NewPlatform()
	p.AddWorkload("echo:7", runEcho(b))
	p.SetNames(tunnel.ClusterName{Name: "echo", UDPPorts: []int{7}})
	addr, hostKey, _ := tunneltest.StartAgent(b, p, func(a *tunnel.Agent) { a.Logf = func(string, ...any) {} })
	if delay > 0 {
		addr = tunneltest.NewDelayLine(b, addr, delay)
	}
	signer, _ := newKey(b)
	s, _ := connect(b, addr, hostKey, signer, tunnel.RunInfo{})
	benchmarkEchoes(b, localFlows(b, s, "echo:7"), window)
}

// BenchmarkCarriedUDPNameAt20ms is BenchmarkCarriedUDPName with the SSH
// connections through a 20 ms round trip without loss
// (tunneltest.NewDelayLine), 1,536 datagrams in flight (1.8 MB, within a
// flow's queue of 2 MiB: 690 Mbit/s at 21.5 ms): what one flow carries
// over its run's lanes (lanes.go), which open over such a round trip.
func BenchmarkCarriedUDPNameAt20ms(b *testing.B) { benchmarkCarriedUDP(b, 10*time.Millisecond, 1536) }

// BenchmarkServedUDPName: a workload's datagrams to a name whose UDP port
// a run serves, to the developer's echo and back (the agent's
// DatagramFlows, a forwarded-datagram channel, the run's socket to the
// echo): compare with BenchmarkServedName, one way of TCP.
func BenchmarkServedUDPName(b *testing.B) {
	p := tunneltest.NewPlatform()
	addr, hostKey, _ := tunneltest.StartAgent(b, p, func(a *tunnel.Agent) { a.Logf = func(string, ...any) {} })
	signer, _ := newKey(b)
	s, _ := connect(b, addr, hostKey, signer, tunnel.RunInfo{Serves: true})
	if _, err := s.ServeUDP(context.Background(), "echo", 7, runEcho(b)); err != nil {
		b.Fatal(err)
	}
	c, err := p.DialContext(context.Background(), "udp", "echo:7")
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	benchmarkEchoes(b, c.(*net.UDPConn), udpWindow)
}
