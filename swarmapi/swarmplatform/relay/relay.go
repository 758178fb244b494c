// Package relay is `plug relay`: the small TCP forwarder the Swarm platform
// runs as a service on the application's network, under the name a
// developer serves, in front of the agent that holds the session.
//
//	plug relay --listen :PORT --to ADDR [--listen :PORT --to ADDR]...
//
// Each --listen is paired with the --to that follows it. Every connection
// accepted on a listen address is connected to its ADDR and bytes are copied
// both ways until both sides have closed.
package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Usage is the command's synopsis.
const Usage = "plug relay --listen :PORT --to HOST:PORT [--listen :PORT --to HOST:PORT]..."

// Route is one listen address and where its connections go.
type Route struct {
	Listen string
	To     string
}

// Args is the command line of a relay forwarding routes.
func Args(routes []Route) []string {
	args := []string{"relay"}
	for _, r := range routes {
		args = append(args, "--listen", r.Listen, "--to", r.To)
	}
	return args
}

// ParseArgs reads the routes of a relay command line (without "relay").
func ParseArgs(args []string) ([]Route, error) {
	var routes []Route
	for len(args) > 0 {
		if len(args) < 4 || args[0] != "--listen" || args[2] != "--to" {
			return nil, fmt.Errorf("%q: expected --listen :PORT --to HOST:PORT; usage: %s", strings.Join(args, " "), Usage)
		}
		r := Route{Listen: args[1], To: args[3]}
		if _, _, err := net.SplitHostPort(r.Listen); err != nil {
			return nil, fmt.Errorf("--listen %s: %v; usage: %s", r.Listen, err, Usage)
		}
		if _, _, err := net.SplitHostPort(r.To); err != nil {
			return nil, fmt.Errorf("--to %s: %v; usage: %s", r.To, err, Usage)
		}
		routes = append(routes, r)
		args = args[4:]
	}
	if len(routes) == 0 {
		return nil, errors.New("nothing to relay; usage: " + Usage)
	}
	return routes, nil
}

// drain is how long a relay told to stop goes on accepting callers: the
// swarm's DNS may send some to it a moment longer, as its service is
// removed once the name is given back.
const drain = 3 * time.Second

// Command runs `plug relay` with args (without "relay") until drain after
// SIGTERM or SIGINT, and returns the process's exit code.
func Command(args []string) int {
	stopping, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	context.AfterFunc(stopping, func() { time.AfterFunc(drain, cancel) })
	if err := Main(ctx, args); err != nil {
		fmt.Fprintln(os.Stderr, "plug relay:", err)
		return 1
	}
	return 0
}

// Main runs the relay command (args without "relay") until ctx ends.
func Main(ctx context.Context, args []string) error {
	routes, err := ParseArgs(args)
	if err != nil {
		return err
	}
	var lc net.ListenConfig
	listeners := make([]net.Listener, 0, len(routes))
	defer func() {
		for _, ln := range listeners {
			ln.Close()
		}
	}()
	for _, r := range routes {
		ln, err := lc.Listen(ctx, "tcp", r.Listen)
		if err != nil {
			return err
		}
		listeners = append(listeners, ln)
		log.Printf("relay: %s -> %s", ln.Addr(), r.To)
	}
	errs := make(chan error, len(routes))
	for i, ln := range listeners {
		go func() { errs <- Forward(ctx, ln, routes[i].To) }()
	}
	return <-errs
}

// Forward accepts connections on ln until ctx ends or ln fails, and joins
// each to a new connection to addr. It closes ln when it returns.
func Forward(ctx context.Context, ln net.Listener, addr string) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer ln.Close()
	var d net.Dialer
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close()
			up, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				log.Printf("relay: %s: %v", addr, err)
				return
			}
			defer up.Close()
			join(conn, up)
		}()
	}
}

// join copies a to b and b to a until both directions are done, passing on
// each half-close.
func join(a, b net.Conn) {
	done := make(chan struct{})
	go func() {
		copyHalf(a, b)
		close(done)
	}()
	copyHalf(b, a)
	<-done
}

// copyHalf copies src to dst, then closes dst for writing (or entirely when
// it cannot half-close) so the other side sees the end of the stream. A
// failed copy closes both connections, which ends the other direction too.
func copyHalf(dst, src net.Conn) {
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		src.Close()
		return
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	dst.Close()
}
