package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"
)

// udpDatagram is the size of the datagrams of the UDP throughput
// measurement: a QUIC packet's, under every path's MTU.
const udpDatagram = 1200

// A datagram whose byte after its 8-byte sequence number is udpAckOnly
// asks the echo (echoLoop) for an acknowledgment: its first udpAckSize
// bytes, not the whole datagram back. Every other datagram is echoed
// whole.
const (
	udpAckOnly = 1
	udpAckSize = 16
)

// asksAcknowledgment is whether datagram d asks for an acknowledgment.
func asksAcknowledgment(d []byte) bool { return len(d) > udpAckSize && d[8] == udpAckOnly }

// udpSuite measures one UDP path to a UDP echo (benchtool serve answers
// one on each of its ports) from one socket, and prints one CSV line
// "metric,value" per result:
//
//	rr_p50_us, rr_p99_us, rr_lost   -rr round trips of -size bytes, one at a time
//	udp_mbps, udp_dps               -for of 1,200-byte datagrams kept in flight (below)
//	udp_sent, udp_lost, udp_late    datagrams sent in the -for; never echoed; echoed after they were counted lost
//	udp_lost_finding                datagrams sent while the window was being found, never echoed or late
//	udp_window                      datagrams in flight at the end
//
// The throughput is that of the echoes: each datagram crosses the path
// both ways, so both directions carry it at once. With -oneway each
// datagram asks the echo for an acknowledgment, its first udpAckSize
// bytes, instead (udpAckOnly): the throughput is then that of one
// direction, the datagrams sent, as a TCP transfer's is, while the other
// direction carries an acknowledgment of 16 bytes per datagram; the rest
// (the window, lost and late) is the same, with each acknowledgment
// standing for its datagram's echo. The sender keeps a
// window of datagrams in flight, found as it goes. A datagram with no echo
// within 4 round trips (at least 200 ms) is counted lost and its place in
// the window given to a new one. A round is a window's worth of datagrams
// echoed or lost. The window grows by one per echo (doubling each round)
// until a round's fastest echo took more than 5/4 of the fastest ever
// plus 200 µs (a queue stands somewhere on the path) or the round lost
// more than 1 + 1 % of its datagrams (a queue overflowed), then halves;
// from then on it shrinks by an eighth after a round with a queue, halves
// after one that overflowed, and grows by an eighth after any other,
// within udpMinWindow and udpMaxWindow. So
// random loss of a few datagrams does not shrink it, as it would a
// congestion control's. -for counts from udpSettle after the window was
// found (at most 5 s after the start), and so do the datagrams sent, lost
// and late: finding the window overflows a queue on purpose, and what
// that lost, until the queue drained, is udp_lost_finding.
//
// With -samples, it prints every round trip ("rr_us,V") instead of their
// percentiles, for a caller that merges rounds measured in turn. The
// command fails when not one round trip was answered.
func udpSuite(args []string) error {
	fs := flag.NewFlagSet("udp", flag.ExitOnError)
	addr := fs.String("addr", "", "the UDP echo, host:port")
	rr := fs.Int("rr", 10000, "round trips, one datagram at a time (0: none)")
	size := fs.Int("size", 64, "bytes of each round trip's datagram (at least 8)")
	dur := fs.Duration("for", 10*time.Second, "time of the throughput measurement (0: none)")
	timeout := fs.Duration("timeout", time.Second, "how long a round trip's datagram waits for its echo before it counts lost")
	samples := fs.Bool("samples", false, "print every round trip, not percentiles")
	oneway := fs.Bool("oneway", false, "throughput of one direction: each datagram is answered by an acknowledgment of 16 bytes, not echoed")
	fs.Parse(args)
	if *addr == "" {
		return errors.New("give -addr host:port of a UDP echo")
	}
	if *size < 8 || *size > 65507 {
		return errors.New("-size is 8 to 65,507 bytes")
	}
	nc, err := net.Dial("udp", *addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	c := nc.(*net.UDPConn)
	bigBuffers(c)
	if err := takeRuns(c); err != nil {
		return fmt.Errorf("taking datagrams in runs: %w", err)
	}
	out := func(metric string, v float64) { fmt.Printf("%s,%.3f\n", metric, v) }
	if *rr > 0 {
		rtts, lost, err := udpRoundTrips(c, *rr, *size, *timeout)
		if err != nil {
			return fmt.Errorf("round trips: %w", err)
		}
		if len(rtts) == 0 {
			return fmt.Errorf("round trips: not one of %d datagrams to %s was echoed within %v", lost, *addr, *timeout)
		}
		if *samples {
			for _, d := range rtts {
				out("rr_us", micros(d))
			}
		} else {
			out("rr_p50_us", micros(percentile(rtts, 50)))
			out("rr_p99_us", micros(percentile(rtts, 99)))
		}
		out("rr_lost", float64(lost))
	}
	if *dur > 0 {
		r, err := udpThroughput(c, udpDatagram, *dur, *oneway)
		if err != nil {
			return fmt.Errorf("throughput: %w", err)
		}
		out("udp_mbps", float64(r.echoedBytes)*8/dur.Seconds()/1e6)
		out("udp_dps", float64(r.echoed)/dur.Seconds())
		out("udp_sent", float64(r.sent))
		out("udp_lost", float64(r.expired-r.late))
		out("udp_late", float64(r.late))
		out("udp_lost_finding", float64(r.findingExpired))
		out("udp_window", float64(r.window))
	}
	return nil
}

// bigBuffers asks for 4 MiB buffers of a UDP socket (the kernel caps them at its
// net.core.rmem_max and wmem_max), so that a burst of echoes is not
// dropped by the socket before it is read.
func bigBuffers(c any) {
	if u, ok := c.(*net.UDPConn); ok {
		u.SetReadBuffer(4 << 20)
		u.SetWriteBuffer(4 << 20)
	}
}

// udpRoundTrips sends n datagrams of size bytes one at a time, after a
// warm-up of n/100 that is not counted, each carrying its sequence number
// and waiting up to timeout for its echo; it returns the round trips of
// those echoed and how many were not.
func udpRoundTrips(c *net.UDPConn, n, size int, timeout time.Duration) ([]time.Duration, int, error) {
	msg := make([]byte, size)
	r := newRunReader(c)
	warm := n / 100
	rtts := make([]time.Duration, 0, n)
	lost := 0
	for i := range warm + n {
		seq := uint64(i)
		binary.BigEndian.PutUint64(msg, seq)
		start := time.Now()
		if _, err := c.Write(msg); err != nil {
			return nil, 0, err
		}
		c.SetReadDeadline(start.Add(timeout))
		for {
			echo, _, err := r.next()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				if i >= warm {
					lost++
				}
				break
			}
			if err != nil {
				return nil, 0, err
			}
			if len(echo) == size && binary.BigEndian.Uint64(echo) == seq {
				if i >= warm {
					rtts = append(rtts, time.Since(start))
				}
				break
			}
			// An echo of an earlier datagram, after it was counted lost.
		}
	}
	return rtts, lost, nil
}

// The window of the throughput measurement.
const (
	udpMinWindow = 16 * udpRun // where CPU bounds a path, runs waiting at each hop let it work in batches
	udpMaxWindow = 8192
	udpTracked   = 1 << 17 // datagrams between the oldest unanswered and the newest
	udpFindLimit = 5 * time.Second
	// udpSettle is how long after the window was found the measured time
	// starts, as iperf's --omit skips a TCP connection's slow start:
	// finding the window overflowed a queue on the path on purpose, and the
	// datagrams sent while it drains would be lost or late for that.
	udpSettle = time.Second
)

type udpResult struct {
	echoed, echoedBytes int64 // the echoes within the measured time
	sent, expired, late int64 // of the datagrams sent within the measured time
	findingExpired      int64 // datagrams sent while the window was being found, expired
	window              int
}

// udpSent is a datagram of the throughput measurement.
type udpSent struct {
	seq   uint64
	at    time.Time
	state uint8
}

const (
	udpPending = iota
	udpEchoed
	udpExpired
)

// udpThroughput keeps datagrams of size bytes in flight to the echo on c,
// in a window found as udpSuite says, for dur after the window was found,
// then waits for those in flight. Echoed, echoedBytes count the echoes
// within those dur (with oneway, the acknowledgments, each for its
// datagram's size bytes); sent, expired and late the datagrams sent within
// them, findingExpired those sent before that expired.
func udpThroughput(c *net.UDPConn, size int, dur time.Duration, oneway bool) (udpResult, error) {
	answer := size
	if oneway {
		answer = udpAckSize
	}
	var r udpResult
	ring := make([]udpSent, udpTracked)
	runMax := runBytes(size)
	run := make([]byte, 0, runMax)
	echoes := newRunReader(c)
	var next, oldest uint64 // the next sequence number; the oldest maybe unanswered
	window, outstanding := udpMinWindow, 0
	var fastest time.Duration // the fastest echo of the run
	roundFastest, roundLeft, roundLost := time.Duration(1<<62), window, 0
	growing := true
	start := time.Now()
	var from, until time.Time // the measured time, once the window is found
	found := func(now time.Time) {
		if from.IsZero() {
			from = now.Add(udpSettle)
			until = from.Add(dur)
		}
	}
	measured := func(at time.Time) bool { return !from.IsZero() && !at.Before(from) && at.Before(until) }
	lossAfter := func() time.Duration {
		if fastest == 0 {
			return time.Second
		}
		return max(200*time.Millisecond, 4*fastest)
	}
	// endRound moves the window once a round's worth of datagrams were
	// echoed or lost: is a queue standing, or were many lost at once?
	endRound := func(now time.Time) {
		queued := roundFastest > fastest+fastest/4+200*time.Microsecond
		overflowed := roundLost > 1+window/100
		switch {
		case overflowed || growing && queued:
			growing = false
			window /= 2
			found(now)
		case queued:
			window -= window / 8
		case !growing:
			window += window / 8
		}
		window = max(udpMinWindow, min(window, udpMaxWindow))
		if window == udpMaxWindow {
			growing = false
			found(now)
		}
		roundFastest, roundLeft, roundLost = time.Duration(1<<62), window, 0
	}
	for {
		now := time.Now()
		if from.IsZero() && now.Sub(start) > udpFindLimit {
			found(now)
		}
		stopping := !from.IsZero() && !now.Before(until)
		if stopping && outstanding == 0 {
			break
		}
		// Those unanswered for too long are lost; their places go to new ones.
		wait := lossAfter()
		for oldest < next {
			s := &ring[oldest%udpTracked]
			if s.state == udpPending {
				if now.Sub(s.at) < wait {
					break
				}
				s.state = udpExpired
				outstanding--
				if measured(s.at) {
					r.expired++
				} else {
					r.findingExpired++
				}
				roundLost++
				if roundLeft--; roundLeft <= 0 {
					endRound(now)
				}
			}
			oldest++
		}
		if lost := r.expired + r.findingExpired; fastest == 0 && lost > 0 {
			return r, fmt.Errorf("no echo of %d datagrams within %v", lost, wait)
		}
		// The window's free places, a run in each write, once the echoes
		// of the last read are counted: a run of echoes frees a run.
		for !stopping && outstanding < window && next-oldest < udpTracked && !echoes.more() {
			run = run[:0]
			at := time.Now()
			for ; len(run) < runMax && outstanding < window && next-oldest < udpTracked; next++ {
				d := len(run)
				run = binary.BigEndian.AppendUint64(run, next)
				run = append(run, make([]byte, size-8)...)
				if oneway {
					run[d+8] = udpAckOnly
				}
				ring[next%udpTracked] = udpSent{seq: next, at: at}
				outstanding++
				if measured(at) {
					r.sent++
				}
			}
			if err := writeRun(c, run, size, netip.AddrPort{}); err != nil {
				return r, err
			}
		}
		deadline := now.Add(wait)
		if oldest < next {
			deadline = ring[oldest%udpTracked].at.Add(wait)
		}
		if !stopping && !from.IsZero() && until.Before(deadline) {
			deadline = until
		}
		if !echoes.more() {
			c.SetReadDeadline(deadline) // next reads the socket
		}
		echo, _, err := echoes.next()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			continue
		}
		if err != nil {
			return r, err
		}
		if len(echo) != answer {
			continue
		}
		seq := binary.BigEndian.Uint64(echo)
		s := &ring[seq%udpTracked]
		if seq >= next || s.seq != seq {
			continue
		}
		now = time.Now()
		switch s.state {
		case udpExpired:
			if measured(s.at) {
				r.late++
			}
			s.state = udpEchoed
			continue
		case udpEchoed:
			continue // a duplicate
		}
		s.state = udpEchoed
		outstanding--
		if !from.IsZero() && !now.Before(from) && now.Before(until) {
			r.echoed++
			r.echoedBytes += int64(size)
		}
		rtt := now.Sub(s.at)
		if fastest == 0 || rtt < fastest {
			fastest = rtt
		}
		roundFastest = min(roundFastest, rtt)
		if growing {
			window++
		}
		if roundLeft--; roundLeft <= 0 {
			endRound(now)
		}
	}
	r.window = window
	return r, nil
}
