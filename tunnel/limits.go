package tunnel

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Limits are the caps that keep one peer from taking what the agent needs
// to serve the others. Each is counted on one agent replica. A zero field
// takes its default (DefaultLimits); deploy/README.md lists each with the
// environment variable that sets it.
type Limits struct {
	// RunsPerKey is how many runs one developer key may have open at once.
	RunsPerKey int
	// NamesPerKey is how many names the runs of one key may serve at once.
	NamesPerKey int
	// ChannelsPerKey is how many connections the runs of one key may have
	// open through the agent at once: dialled in the cluster, and callers
	// of the names they serve. Every channel of a striped connection
	// (stripe.go; at most maxStripes for one connection) counts as one.
	ChannelsPerKey int
	// ConnsPerKey is how many SSH connections one key may have open.
	ConnsPerKey int
	// Channels and Conns bound the same for all keys together.
	Channels int
	Conns    int
}

// DefaultLimits are the caps of an agent whose Limits are not set. They
// fit in the memory limit of deploy/plug-k8s.yaml (1 GiB): a connection
// through the agent costs it about 20 KiB (three goroutines, their buffers,
// the SSH channel), so Channels of them take some 600 MiB, and the garbage
// collector keeps the agent under 90 % of its container's limit
// (measured by TestTheAgentsMemoryFitsTheManifestsLimit: 841 MiB at the
// peak with 200 keys asking for 500 connections each).
var DefaultLimits = Limits{
	RunsPerKey:     16,
	NamesPerKey:    32,
	ChannelsPerKey: 1000,
	ConnsPerKey:    32,
	Channels:       30000,
	Conns:          1000,
}

// withDefaults returns l with every zero field set to its default.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	for _, f := range []struct{ v, def *int }{
		{&l.RunsPerKey, &d.RunsPerKey}, {&l.NamesPerKey, &d.NamesPerKey}, {&l.ChannelsPerKey, &d.ChannelsPerKey},
		{&l.ConnsPerKey, &d.ConnsPerKey}, {&l.Channels, &d.Channels}, {&l.Conns, &d.Conns},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	return l
}

// Limits that are not settings: a connection that has not authenticated
// costs the agent little and is given little.
const (
	// handshakeTimeout is how long a connection has to complete its SSH
	// handshake and authenticate.
	handshakeTimeout = 10 * time.Second
	// maxUnauthenticated is how many connections may be in their handshake,
	// or be the get user's, at once; maxUnauthenticatedPerAddr how many of
	// those one source address (an IPv6 /64) may have. A flood from one
	// address takes only its own share.
	maxUnauthenticated        = 512
	maxUnauthenticatedPerAddr = 32
	// A connection over those caps waits up to slotWait for a slot, before
	// its handshake begins: a burst (many runs started at once behind one
	// NAT address) is queued rather than refused. maxWaiting connections
	// may wait at once, maxWaitingPerAddr from one address; one over those
	// is refused at once.
	slotWait          = 5 * time.Second
	maxWaiting        = 512
	maxWaitingPerAddr = 64
)

// busyPrefix starts the line the agent sends, before closing, to a
// connection it refuses over the caps above. RFC 4253 (4.2) lets a server
// send lines of text before its version line; SSH clients ignore them, and
// plug's CLI recognises this one and tries again (client_retry.go).
const busyPrefix = "plug agent busy: "

// capError says a peer reached one of the agent's caps. Text names the cap
// and the setting that raises it.
type capError struct{ text string }

func (e *capError) Error() string { return e.text }

// What a key's usage counts.
type usageKind int

const (
	useConn usageKind = iota
	useRun
	useName
	useChannel
)

// usage counts what each key holds on this agent, against Limits.
type usage struct {
	limits Limits

	mu       sync.Mutex
	keys     map[string]*[4]int // by key fingerprint, indexed by usageKind
	conns    int
	channels int
}

func newUsage(l Limits) *usage { return &usage{limits: l.withDefaults(), keys: map[string]*[4]int{}} }

// take counts one more of kind for key, or returns a *capError naming the
// cap it would exceed.
func (u *usage) take(key string, kind usageKind) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	k := u.held(key)
	if err := u.allowed(k, kind); err != nil {
		return err
	}
	u.keys[key] = k
	k[kind]++
	switch kind {
	case useConn:
		u.conns++
	case useChannel:
		u.channels++
	}
	return nil
}

// check returns the *capError take would return, taking nothing.
func (u *usage) check(key string, kind usageKind) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.allowed(u.held(key), kind)
}

// held is what key holds, counted by kind: a new count when nothing.
// Called with u.mu held.
func (u *usage) held(key string) *[4]int {
	if k := u.keys[key]; k != nil {
		return k
	}
	return &[4]int{}
}

// allowed says whether a key holding k may take one more of kind. Called
// with u.mu held.
func (u *usage) allowed(k *[4]int, kind usageKind) error {
	l := u.limits
	switch kind {
	case useConn:
		return cmp.Or(capCheck(k[kind], l.ConnsPerKey, "SSH connections open for one key", "PLUG_MAX_CONNECTIONS_PER_KEY"),
			capCheck(u.conns, l.Conns, "SSH connections open for all keys together", "PLUG_MAX_CONNECTIONS"))
	case useRun:
		return capCheck(k[kind], l.RunsPerKey, "runs open for one key", "PLUG_MAX_RUNS_PER_KEY")
	case useName:
		return capCheck(k[kind], l.NamesPerKey, "names served for one key", "PLUG_MAX_NAMES_PER_KEY")
	default:
		return cmp.Or(capCheck(k[kind], l.ChannelsPerKey, "connections through the agent for one key", "PLUG_MAX_CHANNELS_PER_KEY"),
			capCheck(u.channels, l.Channels, "connections through the agent for all keys together", "PLUG_MAX_CHANNELS"))
	}
}

// give counts one less of kind for key.
func (u *usage) give(key string, kind usageKind) {
	u.mu.Lock()
	defer u.mu.Unlock()
	k := u.keys[key]
	if k == nil || k[kind] == 0 {
		return
	}
	k[kind]--
	switch kind {
	case useConn:
		u.conns--
	case useChannel:
		u.channels--
	}
	if *k == [4]int{} {
		delete(u.keys, key) // a key that holds nothing is forgotten
	}
}

func capCheck(n, max int, what, setting string) error {
	if n < max {
		return nil
	}
	countCap(setting)
	return &capError{text: fmt.Sprintf("the agent's cap of %d %s is reached; end some, or ask the cluster admin to raise %s", max, what, setting)}
}

// addrLimiter bounds the unauthenticated connections per source address
// and in all, and queues those over the bounds for a while.
type addrLimiter struct {
	mu      sync.Mutex
	total   int // connections holding a slot
	waiting int // connections waiting for one
	per     map[netip.Addr]*addrCount
	freed   broadcast // woken when a slot is given back
}

type addrCount struct{ held, waiting int }

// take counts a connection from addr: at once when addr and everybody are
// under their caps (taken); else it joins the queue, and must call wait,
// when the queue has room (queued); else it is refused, and why says why.
func (l *addrLimiter) take(addr netip.Addr) (taken, queued bool, why string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.count(addr)
	if c.waiting == 0 && l.free(c) { // those waiting from addr go first
		c.held++
		l.total++
		return true, false, ""
	}
	switch {
	case c.waiting >= maxWaitingPerAddr:
		l.forget(addr, c)
		return false, false, fmt.Sprintf("%s, and %d from it are waiting for their turn", l.full(c), maxWaitingPerAddr)
	case l.waiting >= maxWaiting:
		l.forget(addr, c)
		return false, false, fmt.Sprintf("%s, and %d are waiting for their turn", l.full(c), maxWaiting)
	}
	c.waiting++
	l.waiting++
	return false, true, ""
}

// wait waits, for a connection take queued, until a slot is free (true),
// until slotWait has passed or ctx ends (false, and why). It leaves the
// queue either way.
func (l *addrLimiter) wait(ctx context.Context, addr netip.Addr) (bool, string) {
	timeout := time.NewTimer(slotWait)
	defer timeout.Stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.per[addr]
	defer func() {
		c.waiting--
		l.waiting--
		l.forget(addr, c)
	}()
	for !l.free(c) {
		freed := l.freed.next()
		l.mu.Unlock()
		select {
		case <-freed:
		case <-timeout.C:
			l.mu.Lock()
			return false, l.full(c) + fmt.Sprintf(" and it waited %s for its turn", slotWait)
		case <-ctx.Done():
			l.mu.Lock()
			return false, "the agent is stopping"
		}
		l.mu.Lock()
	}
	c.held++
	l.total++
	return true, ""
}

func (l *addrLimiter) give(addr netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.per[addr]
	c.held--
	l.total--
	l.forget(addr, c)
	l.freed.wake()
}

// count is addr's count, a new one if it has none. Called with l.mu held.
func (l *addrLimiter) count(addr netip.Addr) *addrCount {
	if l.per == nil {
		l.per = map[netip.Addr]*addrCount{}
	}
	c := l.per[addr]
	if c == nil {
		c = &addrCount{}
		l.per[addr] = c
	}
	return c
}

// forget drops addr's count once it counts nothing. Called with l.mu held.
func (l *addrLimiter) forget(addr netip.Addr, c *addrCount) {
	if *c == (addrCount{}) {
		delete(l.per, addr)
	}
}

// free says whether an address counted c may take a slot. Called with
// l.mu held.
func (l *addrLimiter) free(c *addrCount) bool {
	return c.held < maxUnauthenticatedPerAddr && l.total < maxUnauthenticated
}

// full says which cap an address counted c is at. Called with l.mu held.
func (l *addrLimiter) full(c *addrCount) string {
	if c.held >= maxUnauthenticatedPerAddr {
		return fmt.Sprintf("%d connections from that address are in their handshake or downloading already", maxUnauthenticatedPerAddr)
	}
	return fmt.Sprintf("%d connections are in their handshake or downloading already", maxUnauthenticated)
}

// sourceOf is the source address a connection is counted under: its IP,
// or for IPv6 its /64, which one host is usually given whole.
func sourceOf(addr net.Addr) netip.Addr {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return netip.Addr{}
	}
	ip := ap.Addr().Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.Addr()
	}
	return ip
}
