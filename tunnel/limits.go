package tunnel

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"net"
	"net/netip"
	"runtime/debug"
	"sync"
	"time"
)

// Limits are the caps that keep one peer from taking what the agent needs
// to serve the others. Each is counted on one agent replica. A zero field
// takes its default: DefaultLimits, the agent-wide ones lowered to what the
// process's file descriptors and memory limit hold (sized).
// deploy/README.md lists each with the environment variable that sets it.
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
	// MemoryPerKey is how many MiB of what the peers of one key sent may
	// wait in the agent to be carried (holdings): more datagrams are
	// dropped, a connection more that stalls is ended.
	MemoryPerKey int
	// Channels, Conns, Runs, Names and Memory bound the same for all keys
	// together; Volumes the volumes served to all runs together
	// (MaxRunVolumes bounds one run's).
	Channels int
	Conns    int
	Runs     int
	Names    int
	Volumes  int
	Memory   int
}

// DefaultLimits are the caps of an agent whose Limits are not set, before
// the agent-wide ones are lowered to what its process holds (sized).
var DefaultLimits = Limits{
	RunsPerKey:     16,
	NamesPerKey:    32,
	ChannelsPerKey: 1000,
	ConnsPerKey:    32,
	MemoryPerKey:   64,
	Channels:       30000,
	Conns:          1000,
	Runs:           1000,
	Names:          4096,
	Volumes:        32,
	Memory:         256,
}

// How the agent-wide defaults are sized. Each SSH connection, each
// connection dialled for a run or calling a served name, and each served
// name (its listener or UDP socket) holds a file descriptor; fdReserve are
// kept for the agent's own (its listener, the platform's API). Of the file
// descriptors left, SSH connections may take a sixteenth, names an eighth
// and connections through the agent half, so that together they never run
// out. Of the Go memory limit (which plug agent sets from its container's),
// connections through the agent may take two thirds at channelCost each,
// names an eighth at nameCost each, and data waiting to be carried a
// quarter.
const (
	fdReserve   = 64
	channelCost = 30 << 10 // bytes of resident memory, measured by TestTheAgentsMemoryFitsTheManifestsLimit
	nameCost    = 16 << 10 // bytes, measured by TestNamesOfAllKeysAreCappedBeforeFilesRunOut
)

// withDefaults returns l with every zero field set to its default, sized
// to this process's file descriptors and memory limit.
func (l Limits) withDefaults() Limits {
	return l.over(DefaultLimits.sized(openFileLimit(), debug.SetMemoryLimit(-1)))
}

// over returns l with every zero field taken from d.
func (l Limits) over(d Limits) Limits {
	for _, f := range []struct{ v, def *int }{
		{&l.RunsPerKey, &d.RunsPerKey}, {&l.NamesPerKey, &d.NamesPerKey}, {&l.ChannelsPerKey, &d.ChannelsPerKey},
		{&l.ConnsPerKey, &d.ConnsPerKey}, {&l.MemoryPerKey, &d.MemoryPerKey}, {&l.Channels, &d.Channels},
		{&l.Conns, &d.Conns}, {&l.Runs, &d.Runs}, {&l.Names, &d.Names}, {&l.Volumes, &d.Volumes}, {&l.Memory, &d.Memory},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	return l
}

// sized lowers the agent-wide caps of l to what files file descriptors
// (0: no limit known) and a Go memory limit of memory bytes (math.MaxInt64:
// none) hold, shared out as the constants above say; none below 1.
func (l Limits) sized(files uint64, memory int64) Limits {
	shrink := func(v *int, room uint64) { *v = max(1, int(min(uint64(*v), room))) }
	if files > 0 {
		fds := uint64(max(0, int64(files)-fdReserve))
		shrink(&l.Conns, fds/16)
		shrink(&l.Names, fds/8)
		shrink(&l.Channels, fds/2)
	}
	if memory > 0 && memory < math.MaxInt64 {
		m := uint64(memory)
		shrink(&l.Channels, m*2/3/channelCost)
		shrink(&l.Names, m/8/nameCost)
		shrink(&l.Memory, m/4>>20)
	}
	l.MemoryPerKey = min(l.MemoryPerKey, l.Memory)
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
	// those one source network (sourceOf: an IPv4 /24, an IPv6 /64) may
	// have. A flood from one network, from however many of its addresses,
	// takes only its own share.
	maxUnauthenticated        = 512
	maxUnauthenticatedPerAddr = 32
	// A connection over those caps waits up to slotWait for a slot, before
	// its handshake begins: a burst (many runs started at once behind one
	// NAT address) is queued rather than refused. maxWaiting connections
	// may wait at once, maxWaitingPerAddr from one source network; one over
	// those is refused at once.
	slotWait          = 5 * time.Second
	maxWaiting        = 512
	maxWaitingPerAddr = 64
)

// maxSessionsPerKey is how many session channels one key may have open:
// x/crypto/ssh keeps what a channel is sent and not yet read, up to its
// window of 2 MiB, and a peer can send faster than the agent reads a
// thousand channels.
const maxSessionsPerKey = 8

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
	useVolume
	useSession
	usageKinds
)

// counts are what a key, or all keys, hold, indexed by usageKind.
type counts [usageKinds]int

// usage counts what each key holds on this agent, against Limits.
type usage struct {
	limits Limits
	given  func() // called, without u.mu, when something is given back

	mu    sync.Mutex
	keys  map[string]*counts // by key fingerprint
	total counts
}

func newUsage(l Limits) *usage { return &usage{limits: l.withDefaults(), keys: map[string]*counts{}} }

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
	u.total[kind]++
	return nil
}

// check returns the *capError take would return, taking nothing.
func (u *usage) check(key string, kind usageKind) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.allowed(u.held(key), kind)
}

// held is what key holds: a new count when nothing. Called with u.mu held.
func (u *usage) held(key string) *counts {
	if k := u.keys[key]; k != nil {
		return k
	}
	return &counts{}
}

// allowed says whether a key holding k may take one more of kind. Called
// with u.mu held.
func (u *usage) allowed(k *counts, kind usageKind) error {
	l, all := u.limits, u.total[kind]
	switch kind {
	case useConn:
		return cmp.Or(capCheck(k[kind], l.ConnsPerKey, "SSH connections open for one key", "PLUG_MAX_CONNECTIONS_PER_KEY"),
			capCheck(all, l.Conns, "SSH connections open for all keys together", "PLUG_MAX_CONNECTIONS"))
	case useRun:
		return cmp.Or(capCheck(k[kind], l.RunsPerKey, "runs open for one key", "PLUG_MAX_RUNS_PER_KEY"),
			capCheck(all, l.Runs, "runs open for all keys together", "PLUG_MAX_RUNS"))
	case useName:
		return cmp.Or(capCheck(k[kind], l.NamesPerKey, "names served for one key", "PLUG_MAX_NAMES_PER_KEY"),
			capCheck(all, l.Names, "names served for all keys together", "PLUG_MAX_NAMES"))
	case useVolume:
		return capCheck(all, l.Volumes, "volumes served for all runs together", "PLUG_MAX_VOLUMES")
	case useSession:
		if k[kind] >= maxSessionsPerKey {
			return &capError{text: fmt.Sprintf("the agent's cap of %d session channels (shells, commands) open for one key is reached; plug's runs need none and `ssh -R` one: close some", maxSessionsPerKey)}
		}
		return nil
	default:
		return cmp.Or(capCheck(k[kind], l.ChannelsPerKey, "connections through the agent for one key", "PLUG_MAX_CHANNELS_PER_KEY"),
			capCheck(all, l.Channels, "connections through the agent for all keys together", "PLUG_MAX_CHANNELS"))
	}
}

// give counts one less of kind for key.
func (u *usage) give(key string, kind usageKind) {
	u.mu.Lock()
	k := u.keys[key]
	if k == nil || k[kind] == 0 {
		u.mu.Unlock()
		return
	}
	k[kind]--
	u.total[kind]--
	if *k == (counts{}) {
		delete(u.keys, key) // a key that holds nothing is forgotten
	}
	u.mu.Unlock()
	if u.given != nil {
		u.given()
	}
}

func capCheck(n, max int, what, setting string) error {
	if n < max {
		return nil
	}
	countCap(setting)
	return &capError{text: fmt.Sprintf("the agent's cap of %d %s is reached; end some, or ask the cluster admin to raise %s", max, what, setting)}
}

// addrLimiter bounds the unauthenticated connections per source network
// (sourceOf) and in all, and queues those over the bounds for a while.
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
		return false, false, fmt.Sprintf("%s, and %d from its network are waiting for their turn", l.full(c), maxWaitingPerAddr)
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
		return fmt.Sprintf("%d connections from that address's network (its /24 or /64) are in their handshake or downloading already", maxUnauthenticatedPerAddr)
	}
	return fmt.Sprintf("%d connections are in their handshake or downloading already", maxUnauthenticated)
}

// sourceOf is the source network a connection is counted under, by its
// first address: for IPv4 its /24, for IPv6 its /64, which one host or
// site is usually given whole. Many addresses of one network then share
// one network's slots.
func sourceOf(addr net.Addr) netip.Addr {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return netip.Addr{}
	}
	ip := ap.Addr().Unmap()
	bits := 24
	if ip.Is6() {
		bits = 64
	}
	p, _ := ip.Prefix(bits)
	return p.Addr()
}
