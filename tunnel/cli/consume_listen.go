package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"plug/tunnel"
	"plug/tunnel/localnames"
)

// carryTimeout bounds how long a connection of CMD waits for the agent to
// open its way into the cluster (the session may be reconnecting).
const carryTimeout = 30 * time.Second

// refusalQuiet is how long a refusal of one name and port is not told
// again.
const refusalQuiet = 10 * time.Second

// portListener accepts CMD's connections to one name's port and carries
// each over its own SSH channel to the agent, which dials the name in the
// cluster.
type portListener struct {
	l       net.Listener
	session *tunnel.Session
	target  string // "name:port" as the agent dials it
	label   string // how the developer is told about it
	refused func(label string, err error)
	done    chan struct{}
}

// listen opens addr:port for target. Its errors are *listenError.
func listen(addr netip.Addr, port int, s *tunnel.Session, target, label string, refused func(string, error)) (*portListener, error) {
	l, err := net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(netip.AddrPortFrom(addr, uint16(port))))
	if err != nil {
		return nil, &listenError{label: label, port: port, err: err}
	}
	pl := &portListener{l: l, session: s, target: target, label: label, refused: refused, done: make(chan struct{})}
	go pl.accept()
	return pl, nil
}

// close stops accepting; connections being carried go on.
func (pl *portListener) close() {
	pl.l.Close()
	<-pl.done
}

func (pl *portListener) accept() {
	defer close(pl.done)
	for {
		c, err := pl.l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(50 * time.Millisecond) // out of descriptors: let some close
			continue
		}
		go pl.carry(c.(*net.TCPConn))
	}
}

// carry joins c to the name in the cluster. When the agent cannot reach it
// (a Service without endpoints refuses at once), c is reset at once, so
// that the program sees its connection fail instead of waiting.
func (pl *portListener) carry(c *net.TCPConn) {
	ctx, cancel := context.WithTimeout(context.Background(), carryTimeout)
	defer cancel()
	err := pl.session.Carry(ctx, c, pl.target)
	if err == nil {
		return
	}
	c.SetLinger(0)
	c.Close()
	pl.refused(pl.label, err)
}

// listenError says why a name's port could not be opened on this machine.
type listenError struct {
	label string // name:port
	port  int
	err   error
}

func (e *listenError) Error() string {
	switch {
	case localnames.IsPrivilegedPort(e.err):
		return fmt.Sprintf("%s does not answer: ports below 1024 need the one-time preparation of this machine; run sudo plug setup", e.label)
	case localnames.IsAddrInUse(e.err):
		return fmt.Sprintf("%s does not reach the cluster: port %d is taken on this machine by a program listening on all addresses, which answers instead; stop it to reach the cluster's", e.label, e.port)
	}
	return fmt.Sprintf("%s does not answer: %v", e.label, e.err)
}

func (e *listenError) Unwrap() error { return e.err }

// refusals tells each refusal of a name's port once per refusalQuiet.
type refusals struct {
	mu   sync.Mutex
	last map[string]time.Time
	say  func(string)
}

func (r *refusals) refused(label string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.last[label]) < refusalQuiet {
		return
	}
	if r.last == nil {
		r.last = map[string]time.Time{}
	}
	r.last[label] = time.Now()
	var dialErr *tunnel.DialError
	if errors.As(err, &dialErr) {
		err = errors.New(dialErr.Reason)
	}
	r.say(fmt.Sprintf("warning: a connection to %s was refused: %v", label, err))
}
