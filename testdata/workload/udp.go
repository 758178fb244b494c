package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"sort"
	"time"
)

// udpEcho sends every datagram it receives on ADDR back to its sender.
func udpEcho(args []string) error {
	if len(args) != 1 {
		return errors.New("give exactly one address, e.g. :9053")
	}
	pc, err := net.ListenPacket("udp", args[0])
	if err != nil {
		return err
	}
	buf := make([]byte, 65535)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return err
		}
		pc.WriteTo(buf[:n], from)
	}
}

// udpSend sends N datagrams "MSG I" to ADDR from one socket, as nc -u
// does, each after the reply to the one before, and prints each reply a
// line; a datagram without a reply within the timeout is reported on
// stderr and fails the command once all are sent.
func udpSend(args []string) error {
	fs := flag.NewFlagSet("udpsend", flag.ExitOnError)
	n := fs.Int("n", 1, "datagrams to send")
	timeout := fs.Duration("timeout", 2*time.Second, "time to wait for each reply")
	if err := parseArgs(fs, args, 2, "give an address and a message, e.g. stats:8125 hello"); err != nil {
		return err
	}
	conn, err := net.Dial("udp", fs.Arg(0))
	if err != nil {
		return err
	}
	defer conn.Close()
	lost := 0
	buf := make([]byte, 65535)
	for i := range *n {
		conn.Write(fmt.Appendf(nil, "%s %d", fs.Arg(1), i))
		conn.SetReadDeadline(time.Now().Add(*timeout))
		got, err := conn.Read(buf)
		if err != nil {
			fmt.Fprintf(os.Stderr, "datagram %d: no reply: %v\n", i, err)
			lost++
			continue
		}
		fmt.Printf("%s\n", buf[:got])
	}
	if lost > 0 {
		return fmt.Errorf("%d of %d datagrams had no reply", lost, *n)
	}
	return nil
}

// udpBench measures the UDP path to ADDR, an echo, from one socket: the
// round trip of RR datagrams of 64 bytes, one at a time, and then for D the
// throughput of 1,400-byte datagrams with 32 in flight (a window refilled
// when no echo came for 200 ms, those outstanding counted lost). It prints
// one line: "p50_us P p99_us Q mbps M sent S lost L".
func udpBench(args []string) error {
	fs := flag.NewFlagSet("udpbench", flag.ExitOnError)
	rr := fs.Int("rr", 2000, "round trips of the latency measurement")
	dur := fs.Duration("for", 5*time.Second, "time of the throughput measurement")
	if err := parseArgs(fs, args, 1, "give the address of a UDP echo, e.g. echo:5353"); err != nil {
		return err
	}
	conn, err := net.Dial("udp", fs.Arg(0))
	if err != nil {
		return err
	}
	defer conn.Close()
	buf := make([]byte, 65535)
	var rtts []time.Duration
	ping := make([]byte, 64)
	for i := range *rr {
		ping[0], ping[1] = byte(i>>8), byte(i)
		start := time.Now()
		conn.Write(ping)
		conn.SetReadDeadline(start.Add(time.Second))
		for {
			n, err := conn.Read(buf)
			if err != nil {
				break
			}
			if n == len(ping) && buf[0] == ping[0] && buf[1] == ping[1] {
				rtts = append(rtts, time.Since(start))
				break
			}
		}
	}
	if len(rtts) == 0 {
		return errors.New("no echo came back")
	}
	sort.Slice(rtts, func(a, b int) bool { return rtts[a] < rtts[b] })
	const size, window = 1400, 32
	payload := make([]byte, size)
	sent, lost, outstanding := 0, 0, 0
	var echoed int64
	fill := func() {
		for ; outstanding < window; outstanding++ {
			conn.Write(payload)
			sent++
		}
	}
	start := time.Now()
	fill()
	for time.Since(start) < *dur {
		conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		n, err := conn.Read(buf)
		if err != nil {
			lost += outstanding
			outstanding = 0
		} else {
			echoed += int64(n)
			outstanding = max(outstanding-1, 0)
		}
		fill()
	}
	took := time.Since(start)
	fmt.Printf("p50_us %.0f p99_us %.0f mbps %.1f sent %d lost %d\n",
		float64(rtts[len(rtts)/2])/1e3, float64(rtts[len(rtts)*99/100])/1e3, float64(echoed)*8/took.Seconds()/1e6, sent, lost)
	return nil
}
