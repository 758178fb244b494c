package tunnel

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"
)

// The path proof: while a run serves a name, the agent connects to
// NAME:PORT from inside the cluster (Platform.DialContext), as any workload
// would, and checks that the connection arrives at the run's own listener.
// It does so shortly after the name is served, again every proofEvery, and
// in a burst after the platform says something that routes the name changed
// (EventPathChanged). The developer is told only when the state changes:
// the name is not reachable, is answered by something else, or reaches the
// run again.
//
// A probe is recognised at the listener by what it sends, not by where it
// comes from: kube-proxy and relays may rewrite both the source address and
// the source port. While a probe is in flight (its window, a few
// milliseconds when the path is right), each connection the listener
// accepts is held until its first bytes show whether it is the probe: the
// probe sends a random nonce, and only once the listener has accepted a
// connection, so that a workload that got the name back is sent nothing.
// The probe is closed at the listener and never reaches the developer's
// process; another caller accepted during the window is passed on with the
// bytes read from it, unchanged, as soon as they differ from the nonce.

const (
	// proofEvery is how often a served name's path is proved when nothing
	// says it changed.
	proofEvery = 30 * time.Second
	// proofConfirm is how long a bad result must last, over two probes,
	// before the developer is told: kube-proxy, DNS and relays take a
	// moment to follow a change.
	proofConfirm = 4 * time.Second
	// proofDial bounds the probe's connection attempt.
	proofDial = 5 * time.Second
	// proofArrive is how long a connection that got through has to arrive
	// at the run's listener.
	proofArrive = 3 * time.Second
	// nonceSize is the length of the probe's nonce.
	nonceSize = 16
	// maxProofAddrs bounds the addresses of a name probed in one check.
	maxProofAddrs = 8
)

// proofBurst are the delays, after a name is served or its path changed,
// of the probes that follow the change.
var proofBurst = []time.Duration{500 * time.Millisecond, 2 * time.Second, 5 * time.Second, 10 * time.Second}

// pathState is what the last probes found of a name's path.
type pathState int

const (
	pathUnknown     pathState = iota
	pathProven                // the probe arrived at the run's listener
	pathUnreachable           // the connection failed, or was closed at once
	pathElsewhere             // the connection got through, but not to this run
)

// proofResult is one check of a name's path.
type proofResult struct {
	state pathState
	why   string // what was seen, for the developer
}

// pathProof proves the path of one served name.
type pathProof struct {
	name   string
	port   int
	dial   func(ctx context.Context, network, address string) (net.Conn, error)
	lookup func(ctx context.Context, host string) ([]string, error) // nil: the name is dialled as it is
	tell   func(Event)
	logf   func(format string, args ...any)
	kick   chan struct{}
	told   pathState // what the developer was last told (pathUnknown: nothing); run's own

	mu     sync.Mutex
	window *probeWindow // the probe in flight, if any
	last   Event        // the last warning or healing told, to say again to a connection that re-attaches
}

func newPathProof(name string, port int, p Platform, tell func(Event), logf func(string, ...any)) *pathProof {
	pp := &pathProof{name: name, port: port, dial: p.DialContext, tell: tell, logf: logf, kick: make(chan struct{}, 1)}
	if r, ok := p.(HostResolver); ok {
		pp.lookup = r.LookupHost
	}
	return pp
}

// changed asks for the path to be proved again at once.
func (pp *pathProof) changed() {
	select {
	case pp.kick <- struct{}{}:
	default:
	}
}

// retell says again what the developer was last told when it is a
// warning: for a connection that re-attaches to the run.
func (pp *pathProof) retell() {
	pp.mu.Lock()
	e := pp.last
	pp.mu.Unlock()
	if e.Kind == EventWarning {
		pp.tell(e)
	}
}

// run proves the path until ctx ends: a burst of probes at once, again
// after each change, and one every proofEvery in between.
func (pp *pathProof) run(ctx context.Context) {
	burstFrom, burst := time.Now(), 0
	next := burstFrom.Add(proofBurst[0])
	var pending proofResult // a bad result not yet confirmed
	var pendingSince time.Time
	timer := time.NewTimer(proofBurst[0])
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-pp.kick:
			// Changes in a row restart the burst, but never put off a
			// probe already due.
			burstFrom, burst = time.Now(), 0
			next = earliest(next, burstFrom.Add(proofBurst[0]))
			timer.Reset(time.Until(next))
			continue
		case <-timer.C:
		}
		r := pp.check(ctx)
		if ctx.Err() != nil {
			return
		}
		now := time.Now()
		switch {
		case r.state == pathProven || r.state == pp.told:
			pending = proofResult{}
			pp.judge(r)
		case r.state != pending.state:
			pending, pendingSince = r, now
		case now.Sub(pendingSince) >= proofConfirm:
			pending = proofResult{}
			pp.judge(r)
		}
		for burst < len(proofBurst) && !burstFrom.Add(proofBurst[burst]).After(now) {
			burst++
		}
		next = now.Add(proofEvery)
		if burst < len(proofBurst) {
			next = burstFrom.Add(proofBurst[burst])
		}
		if pending.state != pathUnknown {
			next = earliest(next, pendingSince.Add(proofConfirm))
		}
		timer.Reset(time.Until(next))
	}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// judge tells the developer what r means, if it changes what they were
// last told.
func (pp *pathProof) judge(r proofResult) {
	before := pp.told
	pp.told = r.state
	if r.state == before {
		return
	}
	target := net.JoinHostPort(pp.name, strconv.Itoa(pp.port))
	var e Event
	switch r.state {
	case pathProven:
		if before == pathUnknown {
			pp.logf("%s: path proven: a connection to %s from inside the cluster arrived at this run", pp.name, target)
			return
		}
		e = Event{Name: pp.name, Kind: EventHealed, Text: fmt.Sprintf(
			"%s reaches this run again: a connection to %s from inside the cluster arrived here", pp.name, target)}
	case pathUnreachable:
		e = Event{Name: pp.name, Kind: EventWarning, Text: fmt.Sprintf(
			"%s is not reachable inside the cluster: %s. Callers in the cluster fail the same way; plug keeps checking and says when %s reaches this run again",
			pp.name, r.why, pp.name)}
	case pathElsewhere:
		e = Event{Name: pp.name, Kind: EventWarning, Text: fmt.Sprintf(
			"%s is answered by something else: %s, so callers reach another workload (the deployed one got the name back?) and not your process. plug keeps checking and says when %s reaches this run again",
			pp.name, r.why, pp.name)}
	}
	pp.mu.Lock()
	pp.last = e
	pp.mu.Unlock()
	pp.logf("%s", e.Text)
	pp.tell(e)
}

// check probes every address of the name once and returns the worst
// result: something else answering any address hides the run from the
// callers that pick it.
func (pp *pathProof) check(ctx context.Context) proofResult {
	if pp.lookup == nil {
		return pp.probe(ctx, net.JoinHostPort(pp.name, strconv.Itoa(pp.port)))
	}
	lctx, cancel := context.WithTimeout(ctx, proofDial)
	addrs, err := pp.lookup(lctx, pp.name)
	cancel()
	if err != nil || len(addrs) == 0 {
		return proofResult{pathUnreachable, fmt.Sprintf("the name %s does not resolve inside the cluster", pp.name)}
	}
	if len(addrs) > maxProofAddrs {
		addrs = addrs[:maxProofAddrs]
	}
	worst := proofResult{state: pathProven}
	bad := 0
	for _, addr := range addrs {
		r := pp.probe(ctx, net.JoinHostPort(addr, strconv.Itoa(pp.port)))
		if r.state == pathProven {
			continue
		}
		bad++
		if worst.state == pathProven || r.state == pathElsewhere {
			worst = r
		}
	}
	if len(addrs) > 1 && bad > 0 {
		worst.why += fmt.Sprintf(" (%d of the %d addresses %s resolves to)", bad, len(addrs), pp.name)
	}
	return worst
}

// probe connects to addr and reports whether the connection arrives at
// the run's listener.
func (pp *pathProof) probe(ctx context.Context, addr string) proofResult {
	w := pp.open()
	defer pp.close(w)
	target := net.JoinHostPort(pp.name, strconv.Itoa(pp.port))

	dctx, cancel := context.WithTimeout(ctx, proofDial)
	conn, err := pp.dial(dctx, "tcp", addr)
	cancel()
	if err != nil {
		return proofResult{pathUnreachable, "the agent's connection to " + target + " " + dialFailure(err)}
	}
	defer conn.Close()

	// What the far end does on its own: send something, close, or wait.
	heard := make(chan error, 1)
	go func() {
		conn.SetReadDeadline(time.Now().Add(proofArrive))
		var one [1]byte
		n, err := conn.Read(one[:])
		if n > 0 {
			err = nil
		}
		heard <- err
	}()
	select {
	case <-w.accepted:
		// A connection arrived at the listener: if it is this one, the
		// nonce proves it.
		if _, err := conn.Write(w.nonce[:]); err == nil {
			select {
			case <-w.arrived:
				return proofResult{state: pathProven}
			case <-time.After(proofArrive):
			case <-ctx.Done():
			}
		}
		return proofResult{pathElsewhere, "a connection to " + target + " from inside the cluster did not arrive at this run"}
	case err := <-heard:
		switch {
		case err == nil:
			return proofResult{pathElsewhere, "a connection to " + target + " from inside the cluster was answered by a server that is not this run"}
		case errors.Is(err, os.ErrDeadlineExceeded):
			return proofResult{pathElsewhere, fmt.Sprintf("a connection to %s from inside the cluster was accepted, but did not arrive at this run within %s", target, proofArrive)}
		default:
			return proofResult{pathUnreachable, "the agent's connection to " + target + " was accepted and closed at once, before reaching this run"}
		}
	case <-ctx.Done():
		return proofResult{}
	}
}

// dialFailure says why a connection attempt failed, for a sentence
// starting "the agent's connection to NAME:PORT".
func dialFailure(err error) string {
	var dnsErr *net.DNSError
	var netErr net.Error
	switch {
	case errors.As(err, &dnsErr):
		return "failed: the name does not resolve inside the cluster"
	case isRefused(err):
		return "was refused: nothing answers it"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return fmt.Sprintf("timed out after %s: nothing answers it", proofDial)
	}
	return "failed: " + err.Error()
}

// probeWindow is one probe in flight.
type probeWindow struct {
	nonce    [nonceSize]byte
	accepted chan struct{} // closed once the listener accepted a connection
	arrived  chan struct{} // closed once the nonce arrived
	over     chan struct{} // closed when the probe is done: held callers go on
	once     struct{ accepted, arrived sync.Once }
}

// open starts a probe's window.
func (pp *pathProof) open() *probeWindow {
	w := &probeWindow{accepted: make(chan struct{}), arrived: make(chan struct{}), over: make(chan struct{})}
	rand.Read(w.nonce[:])
	pp.mu.Lock()
	pp.window = w
	pp.mu.Unlock()
	return w
}

// close ends a probe's window.
func (pp *pathProof) close(w *probeWindow) {
	pp.mu.Lock()
	if pp.window == w {
		pp.window = nil
	}
	pp.mu.Unlock()
	close(w.over)
}

// screen is called with each connection the listener accepts. Outside a
// probe's window it returns c. Inside one, it reads c's first bytes while
// they match the nonce: the probe is closed here (nil is returned); any
// other connection is returned with the bytes read from it put back.
func (pp *pathProof) screen(c net.Conn) net.Conn {
	pp.mu.Lock()
	w := pp.window
	pp.mu.Unlock()
	if w == nil {
		return c
	}
	w.once.accepted.Do(func() { close(w.accepted) })

	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		select {
		case <-w.over: // the probe is settled: stop waiting for this caller's bytes
			c.SetReadDeadline(time.Now())
		case <-done:
		}
	})
	c.SetReadDeadline(time.Now().Add(proofArrive + time.Second))
	buf := make([]byte, nonceSize)
	n := 0
	for n < nonceSize {
		k, err := c.Read(buf[n:])
		n += k
		if err != nil || !bytes.Equal(buf[:n], w.nonce[:n]) {
			break
		}
	}
	close(done)
	wg.Wait()
	c.SetReadDeadline(time.Time{})
	if n == nonceSize && bytes.Equal(buf, w.nonce[:]) {
		w.once.arrived.Do(func() { close(w.arrived) })
		c.Close()
		return nil
	}
	if n == 0 {
		return c
	}
	return &prefixedConn{Conn: c, prefix: buf[:n]}
}

// prefixedConn is a connection whose first bytes were read already: Read
// returns them first.
type prefixedConn struct {
	net.Conn
	prefix []byte
}

func (p *prefixedConn) Read(b []byte) (int, error) {
	if len(p.prefix) > 0 {
		n := copy(b, p.prefix)
		p.prefix = p.prefix[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// CloseWrite passes a half-close on to the connection.
func (p *prefixedConn) CloseWrite() error {
	if hc, ok := p.Conn.(halfCloser); ok {
		return hc.CloseWrite()
	}
	return p.Conn.Close()
}

// notifyFor passes a platform's event about b to b's run; an
// EventPathChanged proves b's path again instead.
func (a *Agent) notifyFor(r *run, b *binding, e Event) {
	if e.Kind == EventPathChanged {
		if b.proof != nil {
			b.proof.changed()
		}
		return
	}
	a.notify(r, e)
}
