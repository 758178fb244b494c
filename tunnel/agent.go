package tunnel

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// Agent is plug's SSH server in the cluster. Developers authenticate by
// public key; the agent dials cluster names for them (direct-tcpip),
// publishes their processes under cluster names (tcpip-forward with the name
// as bind address), and, to the unauthenticated user "get", hands out the
// installer and the CLI binaries. Plain OpenSSH works as a client.
//
// Set the exported fields, then call Serve once.
type Agent struct {
	Platform Platform
	HostKey  ssh.Signer

	// Admit decides whether a key may open runs as user. Nil admits any key
	// (open admission). Its error text is shown to the developer.
	Admit func(user string, key ssh.PublicKey) error

	// BinDir holds the CLI binaries served to the get user, named
	// plug-<os>-<arch>[.exe], and their SHA256SUMS.
	BinDir string

	// PublicAddr is the host:port developers reach the agent by, if known;
	// the installer uses it when it is not given one.
	PublicAddr string

	// ID names this agent instance (pod or task name) in Holder.Agent.
	ID string

	// Grace is how long the names of a run whose connection dropped are kept
	// for it to reconnect. Default 60 s.
	Grace time.Duration

	// KeepAlive is how often the agent checks that a client is still there;
	// three unanswered checks close the connection. Default 5 s.
	KeepAlive time.Duration

	// Logf receives one line per noteworthy event (runs opened and ended,
	// names served and given back). Default log.Printf.
	Logf func(format string, args ...any)

	ctx      context.Context // Serve's context, for the platform calls of runs
	config   *ssh.ServerConfig
	getSlots chan struct{} // one token per get connection in progress
	preAuth  chan struct{} // one token per handshake in progress
	names    catalogState  // the platform's names, told to every run
	gate     *rightsGate   // the agent's rights: it serves runs once they suffice

	mu      sync.Mutex
	closing bool
	runs    map[string]*run
	raw     map[net.Conn]struct{} // every accepted connection still open
	wg      sync.WaitGroup        // connection handlers and binding listeners
}

const (
	getUser          = "get"
	defaultGrace     = 60 * time.Second
	handshakeTimeout = 20 * time.Second
	maxHandshakes    = 64
	// platformTimeout bounds one Platform.Serve or Release.
	platformTimeout = time.Minute

	// Permissions.Extensions keys set at authentication.
	extRole        = "plug-role"
	extFingerprint = "plug-fingerprint"
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
// ended, else the listener's error. Unless GOGC is set, it sets the
// process's garbage collector target for carrying streams (gc.go).
func (a *Agent) Serve(ctx context.Context, l net.Listener) error {
	if a.Platform == nil || a.HostKey == nil {
		return errors.New("tunnel: an Agent needs a Platform and a HostKey")
	}
	tuneGC()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a.init(ctx)
	a.checkRights(ctx)
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
			a.watchNames(ctx)
		case <-ctx.Done():
		}
	}()
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()

	err := a.acceptLoop(ctx, l)
	cancel()
	a.shutdown()
	a.wg.Wait()
	<-maintained
	<-watched
	return err
}

func (a *Agent) init(ctx context.Context) {
	a.ctx = ctx
	if a.Grace <= 0 {
		a.Grace = defaultGrace
	}
	if a.KeepAlive <= 0 {
		a.KeepAlive = defaultKeepAlive
	}
	if a.Logf == nil {
		a.Logf = log.Printf
	}
	a.getSlots = make(chan struct{}, maxGetSessions)
	a.preAuth = make(chan struct{}, maxHandshakes)
	a.runs = map[string]*run{}
	a.raw = map[net.Conn]struct{}{}
	a.config = a.serverConfig()
	a.gate = newRightsGate()
}

func (a *Agent) acceptLoop(ctx context.Context, l net.Listener) error {
	backoff := 5 * time.Millisecond
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
			a.logf("accepting connections: %v", err)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return nil
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		if !a.track(c) {
			c.Close()
			return nil
		}
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			defer a.untrack(c)
			a.handle(c)
		}()
	}
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
// developer's session.
func (a *Agent) handle(c net.Conn) {
	select {
	case a.preAuth <- struct{}{}:
	default:
		return // too many handshakes at once
	}
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	conn, chans, reqs, err := ssh.NewServerConn(c, a.config)
	<-a.preAuth
	if err != nil {
		return
	}
	c.SetDeadline(time.Time{})
	if conn.Permissions.Extensions[extRole] == roleGet {
		a.serveGet(conn, chans, reqs)
		return
	}
	a.serveDeveloper(conn, chans, reqs)
}

// serverConfig lets the user "get" in without authentication and everyone
// else by public key, admitted by Admit.
func (a *Agent) serverConfig() *ssh.ServerConfig {
	cfg := &ssh.ServerConfig{
		NoClientAuth: true,
		NoClientAuthCallback: func(m ssh.ConnMetadata) (*ssh.Permissions, error) {
			if m.User() != getUser {
				return nil, errors.New("a public key is required")
			}
			return &ssh.Permissions{Extensions: map[string]string{extRole: roleGet}}, nil
		},
		PublicKeyCallback: func(m ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if m.User() == getUser {
				return nil, errors.New("the get user takes no key")
			}
			if a.Admit != nil {
				if err := a.Admit(m.User(), key); err != nil {
					return nil, &ssh.BannerError{Err: err, Message: fmt.Sprintf("plug agent: key %s: %v\n", ssh.FingerprintSHA256(key), err)}
				}
			}
			return &ssh.Permissions{Extensions: map[string]string{
				extRole:        roleDeveloper,
				extFingerprint: ssh.FingerprintSHA256(key),
			}}, nil
		},
		ServerVersion: "SSH-2.0-plug_" + sshVersionWord(Version),
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

// shutdown tells every connected run the agent is going away, gives back
// every name, and closes every connection.
func (a *Agent) shutdown() {
	a.mu.Lock()
	a.closing = true
	runs := make([]*run, 0, len(a.runs))
	for _, r := range a.runs {
		runs = append(runs, r)
	}
	a.mu.Unlock()

	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.endRun(r, ending{by: "agent", reason: "the agent is shutting down", retry: true})
		}()
	}
	wg.Wait()

	a.mu.Lock()
	defer a.mu.Unlock()
	for c := range a.raw {
		c.Close()
	}
}

// platformName is what the welcome says the agent runs on.
func (a *Agent) platformName() string {
	if s, ok := a.Platform.(fmt.Stringer); ok {
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
