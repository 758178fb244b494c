package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// suite measures one path to a bench server and prints one CSV line
// "metric,value" per result:
//
//	up_mbps, down_mbps           one connection, -bytes each way
//	                             (with -sync, stopping before and after each
//	                             transfer until told to go on: for a caller
//	                             that reads the CPU time of the tunnel)
//	rr_p50_us, rr_p99_us         -rr round trips of -size bytes on one connection
//	conn_p50_us, conn_p99_us     -connects new connections, each until its first answer
//	conc_ok, conc_fail, conc_ms  -concurrent connections open at once, each answered
//
// With -samples, it prints every round trip and setup time instead of
// their percentiles ("rr_us,V", "conn_us,V"), for a caller that merges
// rounds measured in turn on several paths.
func suite(args []string) error {
	fs := flag.NewFlagSet("suite", flag.ExitOnError)
	addr := fs.String("addr", "", "the bench server, host:port")
	bytes := fs.Int64("bytes", 1<<30, "bytes of each throughput transfer (0: none)")
	rr := fs.Int("rr", 10000, "request/response round trips (0: none)")
	size := fs.Int("size", 64, "bytes of each request and response")
	connects := fs.Int("connects", 1000, "new connections timed one after the other (0: none)")
	concurrent := fs.Int("concurrent", 0, "connections held open at once (0: none)")
	timeout := fs.Duration("timeout", 30*time.Second, "limit of each connect and of each answer")
	samples := fs.Bool("samples", false, "print every round trip and setup time, not percentiles")
	sync := fs.Bool("sync", false, "before and after each transfer, print \"sync,PHASE\" (up, up-end, down, down-end) and wait for a line on stdin")
	fs.Parse(args)
	if *addr == "" {
		return errors.New("give -addr host:port of a bench server")
	}
	p := prober{addr: *addr, timeout: *timeout}
	out := func(metric string, v float64) { fmt.Printf("%s,%.3f\n", metric, v) }
	times := func(metric string, ds []time.Duration) {
		if *samples {
			for _, d := range ds {
				out(metric+"_us", micros(d))
			}
			return
		}
		out(metric+"_p50_us", micros(percentile(ds, 50)))
		out(metric+"_p99_us", micros(percentile(ds, 99)))
	}
	stdin := bufio.NewReader(os.Stdin)
	at := func(phase string) error {
		if !*sync {
			return nil
		}
		fmt.Printf("sync,%s\n", phase)
		if _, err := stdin.ReadString('\n'); err != nil {
			return fmt.Errorf("waiting on stdin after %s: %w", phase, err)
		}
		return nil
	}
	if *bytes > 0 {
		for _, dir := range []struct {
			name     string
			transfer func(int64) (time.Duration, error)
		}{{"up", p.upload}, {"down", p.download}} {
			if err := at(dir.name); err != nil {
				return err
			}
			took, err := dir.transfer(*bytes)
			if err != nil {
				return fmt.Errorf("%s: %w", dir.name, err)
			}
			if err := at(dir.name + "-end"); err != nil {
				return err
			}
			out(dir.name+"_mbps", mbits(*bytes, took))
		}
	}
	if *rr > 0 {
		rtts, err := p.roundTrips(*rr, *size)
		if err != nil {
			return fmt.Errorf("round trips: %w", err)
		}
		times("rr", rtts)
	}
	if *connects > 0 {
		setups, err := p.connects(*connects)
		if err != nil {
			return fmt.Errorf("connects: %w", err)
		}
		times("conn", setups)
	}
	if *concurrent > 0 {
		ok, took, errs := p.concurrent(*concurrent)
		out("conc_ok", float64(ok))
		out("conc_fail", float64(*concurrent-ok))
		out("conc_ms", float64(took)/float64(time.Millisecond))
		if len(errs) > 0 {
			fmt.Fprintf(os.Stderr, "%d of %d concurrent connections failed, e.g.: %v\n", len(errs), *concurrent, errs[0])
		}
	}
	return nil
}

// prober is a client of one bench server.
type prober struct {
	addr    string
	timeout time.Duration
}

// open connects and sends the command header.
func (p prober) open(head []byte) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", p.addr, p.timeout)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write(head); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// upload sends n bytes and returns how long until the server had them all.
func (p prober) upload(n int64) (time.Duration, error) {
	start := time.Now()
	c, err := p.open(header(cmdUpload, uint64(n), 8))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if err := sendZeros(c, n); err != nil {
		return 0, err
	}
	if err := expectOK(c); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// download asks for n bytes and returns how long until the last arrived.
func (p prober) download(n int64) (time.Duration, error) {
	start := time.Now()
	c, err := p.open(header(cmdDownload, uint64(n), 8))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	got, err := io.CopyBuffer(io.Discard, io.LimitReader(c, n), make([]byte, bulkBuffer))
	if err != nil {
		return 0, err
	}
	if got != n {
		return 0, fmt.Errorf("got %d of %d bytes", got, n)
	}
	return time.Since(start), nil
}

// roundTrips times n echoes of size bytes on one connection, after a
// warm-up of n/100 that is not counted.
func (p prober) roundTrips(n, size int) ([]time.Duration, error) {
	c, err := p.open(header(cmdEcho, uint64(size), 4))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	buf := make([]byte, size)
	warm := n / 100
	samples := make([]time.Duration, 0, n)
	for i := range warm + n {
		start := time.Now()
		if _, err := c.Write(buf); err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return nil, err
		}
		if i >= warm {
			samples = append(samples, time.Since(start))
		}
	}
	return samples, nil
}

// connects times n new connections one after the other, each from the
// dial to its first answer (through a tunnel the local connect alone
// proves nothing), then closes it.
func (p prober) connects(n int) ([]time.Duration, error) {
	samples := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		c, err := p.open([]byte{cmdPing})
		if err != nil {
			return nil, err
		}
		err = expectOKWithin(c, p.timeout)
		samples = append(samples, time.Since(start))
		c.Close()
		if err != nil {
			return nil, err
		}
	}
	return samples, nil
}

// concurrent opens n connections at once and holds each until all are
// answered or failed. It returns how many were answered and how long
// until the last answer.
func (p prober) concurrent(n int) (int, time.Duration, []error) {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		held = make(chan struct{})
	)
	start := time.Now()
	var last time.Duration
	for range n {
		wg.Add(1)
		go func() {
			c, err := p.open([]byte{cmdPing})
			if err == nil {
				err = expectOKWithin(c, p.timeout)
			}
			mu.Lock()
			if err != nil {
				errs = append(errs, err)
			} else {
				last = max(last, time.Since(start))
			}
			mu.Unlock()
			wg.Done()
			if c != nil {
				<-held
				c.Close()
			}
		}()
	}
	wg.Wait()
	close(held)
	return n - len(errs), last, errs
}

// expectOK reads the server's one-byte answer.
func expectOK(c net.Conn) error {
	return expectOKWithin(c, 0)
}

// expectOKWithin is expectOK with a deadline, unless limit is 0.
func expectOKWithin(c net.Conn, limit time.Duration) error {
	if limit > 0 {
		c.SetReadDeadline(time.Now().Add(limit))
		defer c.SetReadDeadline(time.Time{})
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return err
	}
	if b[0] != answerOK {
		return fmt.Errorf("answered %q", b[0])
	}
	return nil
}
