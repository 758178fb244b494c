package tunneltest

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy passes TCP connections to a target, and can break them the ways a
// network does: Cut closes them, Freeze silences them, Close refuses them.
type Proxy struct {
	l      net.Listener
	target string

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	frozen bool

	down atomic.Int64 // bytes passed from the target to the clients
}

// NewProxy listens on 127.0.0.1 and passes every connection to target,
// until the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{l: l, target: target, conns: map[net.Conn]struct{}{}}
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Close takes the network away: live connections are cut, new ones
// refused.
func (p *Proxy) Close() {
	p.l.Close()
	p.Cut()
}

// Addr is the address to connect to instead of the target.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// Down is how many bytes the proxy has passed from the target to its
// clients, on every connection, so far.
func (p *Proxy) Down() int64 { return p.down.Load() }

// Cut closes every live connection, both sides, as a network failure
// would; new connections are passed on as before.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Freeze stops passing data, on live connections and new ones, without
// closing any: both ends see a network that has gone silent.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = true
}

func (p *Proxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			continue // frozen: held open, never answered
		}
		go p.join(c)
	}
}

// track records c; false if the proxy is frozen, in which case c is kept
// open and silent.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns[c] = struct{}{}
	return !p.frozen
}

// Retarget passes new connections to target from now on; live ones are
// left as they are.
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
}

func (p *Proxy) join(c net.Conn) {
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	up, err := net.Dial("tcp", target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	go p.copy(up, c, nil)
	p.copy(c, up, &p.down)
}

// copy passes src to dst, dropping what arrives while frozen, adding what
// it passed to count (if not nil), and closes both when src ends.
func (p *Proxy) copy(dst, src net.Conn, count *atomic.Int64) {
	defer func() {
		dst.Close()
		src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.isFrozen() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			if count != nil {
				count.Add(int64(n))
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) isFrozen() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.frozen
}
