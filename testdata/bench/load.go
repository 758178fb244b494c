package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// load runs in a pod: it waits until every target answers, then keeps
// -conns echo connections per target busy with small round trips for
// -duration, and prints "targets,N", "ready_ms,N" (the wait), "ops,N" and
// "errors,N".
func load(args []string) error {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	targets := fs.String("targets", "", "bench servers, host:port,host:port,...")
	conns := fs.Int("conns", 2, "echo connections per target")
	duration := fs.Duration("duration", 5*time.Second, "how long to keep them busy")
	wait := fs.Duration("wait", 60*time.Second, "how long to wait for every target to answer")
	fs.Parse(args)
	if *targets == "" {
		return errors.New("give -targets")
	}
	addrs := strings.Split(*targets, ",")
	began := time.Now()
	deadline := began.Add(*wait)
	for _, a := range addrs {
		for {
			p := prober{addr: a, timeout: 2 * time.Second}
			c, err := p.open([]byte{cmdPing})
			if err == nil {
				err = expectOKWithin(c, p.timeout)
				c.Close()
			}
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s does not answer: %v", a, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	ready := time.Since(began)
	var ops, errs atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(*duration)
	for _, a := range addrs {
		for range *conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := prober{addr: a, timeout: 10 * time.Second}
				c, err := p.open(header(cmdEcho, 64, 4))
				if err != nil {
					errs.Add(1)
					return
				}
				defer c.Close()
				buf := make([]byte, 64)
				for time.Now().Before(stop) {
					if _, err := c.Write(buf); err != nil {
						errs.Add(1)
						return
					}
					if _, err := io.ReadFull(c, buf); err != nil {
						errs.Add(1)
						return
					}
					ops.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	fmt.Printf("targets,%d\nready_ms,%d\nops,%d\nerrors,%d\n", len(addrs), ready.Milliseconds(), ops.Load(), errs.Load())
	return nil
}
