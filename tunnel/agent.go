package tunnel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"math"
	"net"
	"net/netip"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/tunnel/handout"
)

// Agent is plug's SSH server in the cluster. Developers authenticate by
// public key; the agent dials cluster names for them (direct-tcpip),
// publishes their processes under cluster names (tcpip-forward with the name
// as bind address), and, to the unauthenticated user "get", hands out the
// installer and the CLI binaries (package handout). Plain OpenSSH works as a client.
//
// Set the exported fields, then call Serve once.
type Agent struct {
	Platform Platform
	HostKey  ssh.Signer

	// Closed, when set, names the operator's switch that closes the
	// tunnel (e.g. "PLUG_TUNNEL=closed"): the agent refuses every run and
	// doctor saying so, and serves nothing (closing.go).
	Closed string

	// Keys decides which keys may open runs, and who sees and ends the
	// runs of others (keys.go). Nil admits any key (open admission), and
	// shows each developer their own runs only.
	Keys Keys

	// BinDir holds the CLI binaries served to the get user, gzipped, named
	// plug-<os>-<arch>[.exe].gz, and the SHA256SUMS of the unpacked ones.
	BinDir string

	// PublicAddr is the host:port developers reach the agent by, if known;
	// the installer uses it when it is not given one. When it is empty and
	// the Platform is a PublicAddresser, Serve asks the Platform once, and
	// logs what it found and what that assumes.
	PublicAddr string

	// ID names this agent instance (pod or task name) in Holder.Agent.
	ID string

	// Grace is how long the names of a run whose connection dropped are kept
	// for it to reconnect. Default 60 s.
	Grace time.Duration

	// KeepAlive is how often the agent checks that a client is still there;
	// three unanswered checks close the connection. Default 5 s.
	KeepAlive time.Duration

	// Limits are the caps on what one key, and all together, may hold;
	// zero fields take DefaultLimits.
	Limits Limits

	// Drain is how long the listener of a name given back goes on taking
	// callers (and passing them to the deployed service) once the platform
	// has moved the name's endpoints: the cluster's routing may send some
	// here a moment longer. Default 5 s.
	Drain time.Duration

	// MoveWait bounds how long a stopping agent waits for each connected
	// run to move to another agent (Serve) before it gives the run's names
	// back. Default 30 s.
	MoveWait time.Duration

	// Open narrows what a key nobody vouched for may do (openrules.go).
	// The zero value narrows nothing.
	Open OpenRules

	// AuditDials writes a run.dial event to the audit trail for each
	// connection a run asks the agent to make, within auditDialBurst and
	// auditDialEvery per key (PLUG_AUDIT_DIALS).
	AuditDials bool

	// Dial are the address ranges runs may dial beyond the cluster's names
	// (PLUG_DIAL; see dialpolicy.go). None by default.
	Dial []netip.Prefix

	// ReadyFile, when set, exists exactly while the agent serves runs
	// (ready.go): a readiness probe checks it.
	ReadyFile string

	// Logf receives one line per noteworthy event (runs opened and ended,
	// names served and given back, what was refused). Default log.Printf.
	// What a peer chose is escaped (PeerText), and each peer's lines are
	// rate-limited.
	Logf func(format string, args ...any)

	// Audit receives the audit trail (audit.go): each run opened and how it
	// ended, each name served and given back, each key refused. Nil drops
	// it; plug agent writes it on its standard output with AuditJSON. It is
	// called from many goroutines, and must not block for long.
	Audit func(AuditEvent)

	ctx      context.Context // Serve's context, for the platform calls of runs
	config   *ssh.ServerConfig
	handout  *handout.Server // what the get user is handed
	unauth   addrLimiter     // handshakes and get connections, by source address
	usage    *usage          // what each key holds, against Limits
	held     *holdings       // the bytes waiting to be carried for each key, against Limits
	released chan struct{}   // a key gave something back (returnMemory)
	plog     *peerLog        // the log, rate-limited per peer
	dial     *dialPolicy     // what runs may dial
	names    catalogFeed     // the platform's names, told to every run
	gate     *rightsGate     // the agent's rights: it serves runs once they suffice
	recorder *recorder       // the runs' records in the cluster (agent_records.go)
	envSlots chan struct{}   // one token per environment being read (agent_env.go)
	refused  refusals        // when each refused key was last audited
	admit    *admissionGate  // what refused keys may make the agent record and log (admission.go)
	dials    *rateBuckets    // the dial events each key may have written (auditdial.go)
	updates  updates         // plug update --agent in progress (agentupdate.go)
	lanes    sync.Map        // lane token → the *devConn it names (lanes.go)

	mu      sync.Mutex
	stop    context.CancelFunc // ends Serve
	final   *ending            // how Stop ends the runs; nil: as a restart would
	closing bool
	runs    map[string]*run
	raw     map[net.Conn]struct{} // every accepted connection still open

	frontsMu sync.Mutex        // taken after a run's mu, never before
	fronts   map[string]*front // the names personal takeovers share, by name
	wg       sync.WaitGroup    // connection handlers and binding listeners
}

const (
	getUser         = handout.User
	defaultGrace    = 60 * time.Second
	defaultDrain    = 5 * time.Second
	defaultMoveWait = 30 * time.Second
	// publicAddrTimeout bounds the Platform's search for the agent's
	// public address at start.
	publicAddrTimeout = 10 * time.Second
	// platformTimeout bounds one Platform.Serve or Release.
	platformTimeout = time.Minute

	// Permissions.Extensions keys set at authentication.
	extRole        = "plug-role"
	extFingerprint = "plug-fingerprint"
	extKey         = "plug-key" // the key itself, in SSH wire form
	roleGet        = "get"
	roleDeveloper  = "developer"
)

// Serve accepts connections on l until ctx ends or l fails. It checks the
// agent's rights first (agent_rights.go): while a right that runs need is
// missing it refuses runs, saying why, and answers status requests. Once
// the rights suffice it runs the Platform's Maintain, and follows its
// names (WatchNames) to tell every run what it can consume. Before
// returning it tells every connected run the agent is going away, gives
// back every name it holds (Platform.Release), and closes every
// connection: this is the agent's SIGTERM path. It returns nil when ctx
// ended, else the listener's error.
func (a *Agent) Serve(ctx context.Context, l net.Listener) error {
	if a.Platform == nil || a.HostKey == nil {
		return errors.New("tunnel: an Agent needs a Platform and a HostKey")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a.mu.Lock()
	a.stop = cancel
	a.mu.Unlock()
	a.init(ctx, l)
	a.markReady(false)
	a.checkRights(ctx, 0)
	maintained := make(chan struct{})
	go func() {
		defer close(maintained)
		if !a.awaitRights(ctx) {
			return
		}
		if err := a.Platform.Maintain(ctx); err != nil && ctx.Err() == nil {
			a.logf("platform maintenance stopped: %v", err)
		}
	}()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-a.gate.ready:
			a.markReady(true)
			a.watchNames(ctx)
		case <-ctx.Done():
		}
	}()
	// The records outlive ctx: the ends of the runs shutdown ends are
	// written too.
	recordCtx, stopRecords := context.WithCancel(context.WithoutCancel(ctx))
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		a.recorder.write(recordCtx)
	}()
	ends := make(chan struct{})
	go func() {
		defer close(ends)
		a.recorder.watchEnded(ctx)
	}()
	scavenged := make(chan struct{})
	go func() {
		defer close(scavenged)
		returnMemory(ctx, a.released)
	}()
	keysWatched := make(chan struct{})
	go func() {
		defer close(keysWatched)
		a.watchKeys(ctx)
	}()
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()

	err := a.acceptLoop(ctx, l)
	cancel()
	<-watched
	a.markReady(false)
	a.shutdown()
	a.wg.Wait()
	stopRecords()
	<-recorded
	<-maintained
	<-ends
	<-keysWatched
	<-scavenged
	return err
}

func (a *Agent) init(ctx context.Context, l net.Listener) {
	a.ctx = ctx
	if a.Grace <= 0 {
		a.Grace = defaultGrace
	}
	if a.KeepAlive <= 0 {
		a.KeepAlive = defaultKeepAlive
	}
	if a.Drain <= 0 {
		a.Drain = defaultDrain
	}
	if a.MoveWait <= 0 {
		a.MoveWait = defaultMoveWait
	}
	if a.Logf == nil {
		a.Logf = log.Printf
	}
	public, how := a.publicAddr(ctx, l)
	a.handout = &handout.Server{BinDir: a.BinDir, PublicAddr: public, PublicAddrHow: how, HostKey: a.HostKey.PublicKey(), Version: Version,
		Network: func(addr net.Addr) string { return sourceOf(addr).String() }}
	a.usage = newUsage(a.Limits)
	a.held = newHoldings(a.usage.limits)
	caps, memory := a.usage.limits, "no memory limit"
	if m := debug.SetMemoryLimit(-1); m < math.MaxInt64 {
		memory = fmt.Sprintf("a memory limit of %d MiB", m>>20)
	}
	a.logf("caps for all keys together: %d SSH connections, %d connections through the agent, %d runs, %d names, %d volumes, %d MiB waiting to be carried (sized, where not set, to %d open files and %s)",
		caps.Conns, caps.Channels, caps.Runs, caps.Names, caps.Volumes, caps.Memory, openFileLimit(), memory)
	a.released = make(chan struct{}, 1)
	a.usage.given = func() {
		select {
		case a.released <- struct{}{}:
		default: // told already
		}
	}
	a.plog = newPeerLog(a.Logf)
	a.admit = newAdmissionGate()
	a.dials = newDialAudit()
	a.dial = &dialPolicy{allow: a.Dial}
	if p, ok := a.Platform.(AddressProtector); ok {
		a.dial.protected = p.ProtectedAddrs
	}
	if p, ok := a.Platform.(NameNoter); ok {
		a.dial.explain = p.ExplainName
	}
	a.runs = map[string]*run{}
	a.fronts = map[string]*front{}
	a.raw = map[net.Conn]struct{}{}
	a.config = a.serverConfig()
	a.gate = newRightsGate()
	a.recorder = newRecorder(a)
	a.envSlots = make(chan struct{}, maxEnvRequests)
}

// publicAddr is PublicAddr, or else the address the Platform finds
// (PublicAddresser) and how it found it. Without either the installer asks
// the developer for the address.
func (a *Agent) publicAddr(ctx context.Context, l net.Listener) (addr, how string) {
	p, ok := a.Platform.(PublicAddresser)
	if a.PublicAddr != "" || !ok {
		return a.PublicAddr, ""
	}
	port := 0
	if t, ok := l.Addr().(*net.TCPAddr); ok {
		port = t.Port
	}
	ctx, cancel := context.WithTimeout(ctx, publicAddrTimeout)
	defer cancel()
	addr, how, err := p.PublicAddr(ctx, port)
	if err != nil {
		a.logf("the installer does not know the address developers reach this agent by, and asks them for it: %v; set the agent's public address (PLUG_PUBLIC_ADDR) to tell it", err)
		return "", ""
	}
	a.logf("the installer tells developers to reach this agent at %s: %s; if they reach it by another address, set it as the agent's public address (PLUG_PUBLIC_ADDR)", addr, how)
	return addr, how
}

// acceptErrorLogEvery is how often a failing accept is logged at most; the
// failures between are counted in the next line.
const acceptErrorLogEvery = 10 * time.Second

func (a *Agent) acceptLoop(ctx context.Context, l net.Listener) error {
	backoff := 5 * time.Millisecond
	var logged time.Time // when an accept error was last logged
	unlogged := 0        // accept errors since
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of file descriptors and the like: wait, then go on.
			if time.Since(logged) < acceptErrorLogEvery {
				unlogged++
			} else {
				a.logf("accepting connections: %v (and %d more failures since the last such line); waiting %s before the next", err, unlogged, backoff)
				logged, unlogged = time.Now(), 0
			}
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return nil
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		// A connection over its address's share, and over the queue's, is
		// refused here, at the least cost: a flood must not slow the
		// accepting of others.
		src := sourceOf(c.RemoteAddr())
		taken, queued, why := a.unauth.take(src)
		if !taken && !queued {
			a.refuseBusy(c, src, why)
			continue
		}
		// Past the caps, the connection's writes are gathered (batchConn);
		// closing it sends what waits.
		bc := newBatchConn(c)
		if !a.track(bc) {
			if taken {
				a.unauth.give(src)
			}
			bc.Close()
			return nil
		}
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			defer a.untrack(bc)
			if queued {
				if ok, why := a.unauth.wait(ctx, src); !ok {
					a.refuseBusy(bc, src, why)
					return
				}
			}
			a.handle(bc, src)
		}()
	}
}

// refuseBusy closes a connection over the caps of unauthenticated
// connections, with a line before that says why (busyPrefix): the CLI
// recognises it and tries again.
func (a *Agent) refuseBusy(c net.Conn, src netip.Addr, why string) {
	c.SetWriteDeadline(time.Now().Add(time.Second)) // a new connection's send buffer is empty: this does not wait
	io.WriteString(c, busyPrefix+why+"; try again in a moment\r\n")
	c.Close()
	a.plog.printf(src.String(), "refused a connection from %s: %s", c.RemoteAddr(), why)
	counters.busy.Add(1)
}

// handshakes is how many connections hold a slot of the unauthenticated
// (handshakes and get connections), and how many wait for one.
func (a *Agent) handshakes() (held, waiting int) {
	a.unauth.mu.Lock()
	defer a.unauth.mu.Unlock()
	return a.unauth.total, a.unauth.waiting
}

// track records an open connection so that shutdown can close it; false
// once the agent is shutting down.
func (a *Agent) track(c net.Conn) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closing {
		return false
	}
	a.raw[c] = struct{}{}
	return true
}

func (a *Agent) untrack(c net.Conn) {
	c.Close()
	a.mu.Lock()
	delete(a.raw, c)
	a.mu.Unlock()
}

// handle runs one connection: the SSH handshake, then the get user's or a
// developer's session. Until it authenticates as a developer, the
// connection counts against its source address's share of unauthenticated
// connections, taken for it by acceptLoop (a get connection, which never
// authenticates, counts until it ends); the handshake must be over within
// handshakeTimeout.
func (a *Agent) handle(c *batchConn, src netip.Addr) {
	counted := true
	defer func() {
		if counted {
			a.unauth.give(src)
		}
	}()
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	conn, chans, reqs, err := ssh.NewServerConn(c, a.config)
	if err != nil {
		return
	}
	c.SetDeadline(time.Time{})
	if conn.Permissions.Extensions[extRole] == roleGet {
		a.handout.Serve(conn, chans, reqs)
		return
	}
	a.unauth.give(src)
	counted = false
	fp := conn.Permissions.Extensions[extFingerprint]
	if err := a.usage.take(fp, useConn); err != nil {
		a.plog.printf(fp, "refused a connection of %s (%s) from %s: %v", PeerText(conn.User()), fp, conn.RemoteAddr(), err)
		conn.Close()
		return
	}
	defer a.usage.give(fp, useConn)
	a.serveDeveloper(c, conn, chans, reqs)
}

// serverConfig lets the user "get" in without authentication and everyone
// else by public key, proven by a signature, admitted by Keys and within
// the key's cap of connections (admitProven), with the algorithms of
// algorithms.go only.
func (a *Agent) serverConfig() *ssh.ServerConfig {
	cfg := &ssh.ServerConfig{
		Config:       strongAlgorithms(),
		NoClientAuth: true,
		NoClientAuthCallback: func(m ssh.ConnMetadata) (*ssh.Permissions, error) {
			if m.User() != getUser {
				return nil, errors.New("a public key is required")
			}
			return &ssh.Permissions{Extensions: map[string]string{extRole: roleGet}}, nil
		},
		// A key merely offered is answered "go on" (admission.go): it is
		// asked about once its holder signs with it.
		PublicKeyCallback: func(m ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if m.User() == getUser {
				return nil, errors.New("the get user takes no key")
			}
			return &ssh.Permissions{Extensions: map[string]string{
				extRole:        roleDeveloper,
				extFingerprint: ssh.FingerprintSHA256(key),
				extKey:         string(key.Marshal()),
			}}, nil
		},
		VerifiedPublicKeyCallback: func(m ssh.ConnMetadata, key ssh.PublicKey, perms *ssh.Permissions, _ string) (*ssh.Permissions, error) {
			return a.admitProven(m, key, perms)
		},
		PublicKeyAuthAlgorithms: keyAuthAlgos,
		ServerVersion:           "SSH-2.0-plug_" + sshVersionWord(Version),
	}
	cfg.AddHostKey(a.HostKey)
	return cfg
}

// sshVersionWord makes v fit in an SSH version string: printable ASCII
// without spaces or '-'.
func sshVersionWord(v string) string {
	return strings.Map(func(r rune) rune {
		if r <= ' ' || r > '~' || r == '-' {
			return '_'
		}
		return r
	}, v)
}

// shutdown hands every connected run over to another agent (handOver),
// gives back the names of those that do not move, and closes every
// connection.
func (a *Agent) shutdown() {
	a.mu.Lock()
	a.closing = true
	runs := slices.Collect(maps.Values(a.runs))
	a.mu.Unlock()

	a.mu.Lock()
	final := a.final
	a.mu.Unlock()
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Go(func() {
			if final != nil {
				a.endRun(r, *final)
				return
			}
			a.endRun(r, a.handOver(r))
		})
	}
	wg.Wait()

	// The rollout stopping this agent is told to the developer who asked.
	a.updates.drain()

	// Each connection's Close sends what waits on it, for a bounded time:
	// they are closed together.
	a.mu.Lock()
	conns := slices.Collect(maps.Keys(a.raw))
	a.mu.Unlock()
	for _, c := range conns {
		wg.Go(func() { c.Close() })
	}
	wg.Wait()
}

// platformName is what the welcome says the agent runs on.
func (a *Agent) platformName() string {
	if s, ok := a.Platform.(NamedPlatform); ok {
		return s.String()
	}
	return fmt.Sprintf("%T", a.Platform)
}

// platformContext bounds one platform call; it outlives Serve's context so
// that names are given back during shutdown.
func (a *Agent) platformContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(a.ctx), platformTimeout)
}

func (a *Agent) logf(format string, args ...any) { a.Logf(format, args...) }
