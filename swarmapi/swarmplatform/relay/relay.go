// Package relay is `plug relay`: the small TCP and UDP forwarder the Swarm
// platform runs as a service on the application's network, under the name
// a developer serves, in front of the agent that holds the session.
//
//	plug relay --listen :PORT --to ADDR [--listen-udp :PORT --to ADDR]...
//
// Each --listen (TCP) or --listen-udp is paired with the --to that
// follows it. Every connection accepted on a TCP listen address is
// connected to its ADDR and bytes are copied both ways until both sides
// have closed. The datagrams reaching a UDP listen address are one flow
// per sender, at most MaxFlows at once (more senders' datagrams are
// dropped): each flow sends from a socket of its own to ADDR, whose
// replies go back to the sender, until nothing has crossed for
// tunnel.DatagramIdle.
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

	"plug/tunnel"
)

// Usage is the command's synopsis.
const Usage = "plug relay {--listen|--listen-udp} :PORT --to HOST:PORT [{--listen|--listen-udp} :PORT --to HOST:PORT]..."

// MaxFlows caps the UDP flows of one UDP listen address at once, and
// MaxQueued the bytes of their datagrams waiting to be sent on, together.
const (
	MaxFlows  = 1024
	MaxQueued = 32 << 20
)

// Route is one listen address and where its connections, or datagrams
// (UDP), go.
type Route struct {
	Listen string
	To     string
	UDP    bool
}

// flag is the option naming r's listen address.
func (r Route) flag() string {
	if r.UDP {
		return "--listen-udp"
	}
	return "--listen"
}

// Args is the command line of a relay forwarding routes.
func Args(routes []Route) []string {
	args := []string{"relay"}
	for _, r := range routes {
		args = append(args, r.flag(), r.Listen, "--to", r.To)
	}
	return args
}

// ParseArgs reads the routes of a relay command line (without "relay").
func ParseArgs(args []string) ([]Route, error) {
	var routes []Route
	for len(args) > 0 {
		if len(args) < 4 || args[0] != "--listen" && args[0] != "--listen-udp" || args[2] != "--to" {
			return nil, fmt.Errorf("%q: expected --listen :PORT --to HOST:PORT, or --listen-udp; usage: %s", strings.Join(args, " "), Usage)
		}
		r := Route{Listen: args[1], To: args[3], UDP: args[0] == "--listen-udp"}
		if _, _, err := net.SplitHostPort(r.Listen); err != nil {
			return nil, fmt.Errorf("%s %s: %v; usage: %s", r.flag(), r.Listen, err, Usage)
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
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	var serve []func() error
	for _, r := range routes {
		if r.UDP {
			pc, err := lc.ListenPacket(ctx, "udp", r.Listen)
			if err != nil {
				return err
			}
			closers = append(closers, pc)
			log.Printf("relay: %s/udp -> %s", pc.LocalAddr(), r.To)
			serve = append(serve, func() error { return ForwardDatagrams(ctx, pc.(*net.UDPConn), r.To) })
			continue
		}
		ln, err := lc.Listen(ctx, "tcp", r.Listen)
		if err != nil {
			return err
		}
		closers = append(closers, ln)
		log.Printf("relay: %s -> %s", ln.Addr(), r.To)
		serve = append(serve, func() error { return Forward(ctx, ln, r.To) })
	}
	errs := make(chan error, len(serve))
	for _, f := range serve {
		go func() { errs <- f() }()
	}
	return <-errs
}

// ForwardDatagrams splits the datagrams reaching pc into flows, one per
// sender, at most MaxFlows at once (MaxQueued bytes waiting), and carries each to addr from a socket
// of its own and the replies back (tunnel.PairDatagrams), until ctx ends.
// It closes pc, and ends every flow, when it returns.
func ForwardDatagrams(ctx context.Context, pc *net.UDPConn, addr string) error {
	flows := tunnel.NewDatagramFlows(pc, &tunnel.FlowCap{Max: MaxFlows, MaxQueued: MaxQueued}, func(f net.Conn) {
		up, err := net.Dial("udp", addr)
		if err != nil {
			log.Printf("relay: %s/udp: %v", addr, err)
			f.Close()
			return
		}
		tunnel.PairDatagrams(f, up)
	})
	<-ctx.Done()
	return flows.Close() // which ends every flow

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
