//go:build linux

package smb

import (
	"crypto/rand"
	"errors"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"plug/smb/ntlm"
)

// Limits of what one peer can make the server spend (see the package
// documentation).
const (
	MaxIOSize        = 1 << 20 // largest READ, WRITE, QUERY_DIRECTORY or IOCTL payload
	maxFrame         = MaxIOSize + 64<<10
	maxCredits       = 8192
	maxIO            = 8
	maxOpens         = 16384
	maxSessions      = 16
	maxTrees         = 64
	maxPending       = 256
	maxUnauthed      = 8 // connections not yet logged in
	handshakeTimeout = 10 * time.Second
	writeTimeout     = 30 * time.Second
)

// Where a connection stands in the server's counts (guarded by Server.mu).
const (
	phaseLogin   = iota // counted among the maxUnauthed not yet logged in
	phaseIn             // counted among the Config.MaxConns logged in
	phaseDropped        // closed to make room, no longer counted
)

// Server serves one directory as one share. Its methods are safe for
// concurrent use.
type Server struct {
	cfg   Config
	root  *rootFS
	creds *ntlm.Credentials
	guid  [16]byte
	start time.Time
	// large holds a token for each large buffer in use (see buf.go).
	large chan struct{}

	mu       sync.Mutex
	conns    map[*conn]struct{}
	unauthed int                 // connections in phaseLogin
	loggedIn int                 // connections in phaseIn
	sessions map[uint64]*session // every authenticated session, for reconnects
	nextID   uint64              // session ids
	closed   bool
	lis      []net.Listener

	files   fileTable
	watches watches
	fsw     fsWatch
	// nextPersistent numbers opens server-wide (the persistent FileId);
	// parked holds the durable opens whose client is away.
	nextPersistent atomic.Uint64
	parked         parkedOpens
}

// New checks cfg and opens its directory.
func New(cfg Config) (*Server, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		cfg.Name = "PLUG"
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 32
	}
	root, err := openRoot(cfg.Dir)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:      cfg,
		root:     root,
		creds:    ntlm.NewCredentials(cfg.User, cfg.Password, cfg.Name),
		start:    time.Now(),
		large:    make(chan struct{}, largeBufs(cfg.MaxConns)),
		conns:    map[*conn]struct{}{},
		sessions: map[uint64]*session{},
	}
	s.files.init(s)
	s.parked.m = map[uint64]*open{}
	var id [8]byte
	if _, err := rand.Read(s.guid[:]); err != nil {
		return nil, err
	}
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	// Session ids start at a random point so that they are not guessed
	// across restarts; they only need to be unique.
	s.nextID = uint64(id[0])<<32 | uint64(id[1])<<40 | 1
	return s, nil
}

func (s *Server) logf(format string, args ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf(format, args...)
	}
}

// Serve accepts connections on l and serves each until l is closed or
// Close is called. It returns the error that ended accepting; after Close
// that is nil.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return nil
	}
	s.lis = append(s.lis, l)
	s.mu.Unlock()
	var delay time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		go s.ServeConn(c)
	}
}

// ServeConn serves one connection until the client leaves, it breaks a
// rule that ends a connection, or the server is closed. It closes c.
func (s *Server) ServeConn(nc net.Conn) {
	c := newConn(s, nc)
	if !s.admit(c) {
		nc.Close()
		return
	}
	c.serve()
	s.mu.Lock()
	switch c.phase {
	case phaseLogin:
		s.unauthed--
	case phaseIn:
		s.loggedIn--
	}
	delete(s.conns, c)
	s.mu.Unlock()
}

// admit counts c among the connections not yet logged in. When
// maxUnauthed wait already, the one that has waited longest is closed to
// make room: connections that never log in cannot keep a client out, and
// each has handshakeTimeout at most.
func (s *Server) admit(c *conn) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	var oldest *conn
	if s.unauthed >= maxUnauthed {
		for o := range s.conns {
			if o.phase == phaseLogin && (oldest == nil || o.since.Before(oldest.since)) {
				oldest = o
			}
		}
		oldest.phase = phaseDropped
		s.unauthed--
	}
	c.phase, c.since = phaseLogin, time.Now()
	s.unauthed++
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	if oldest != nil {
		s.logf("smb: connection from %s closed: %d connections are waiting to log on, it waited longest", oldest.nc.RemoteAddr(), maxUnauthed)
		oldest.nc.Close()
	}
	return true
}

// logIn moves c from the connections not yet logged in to the logged-in
// ones, when it is still counted and fewer than Config.MaxConns are
// logged in.
func (s *Server) logIn(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.phase != phaseLogin || s.loggedIn >= s.cfg.MaxConns {
		return false
	}
	c.phase = phaseIn
	s.unauthed--
	s.loggedIn++
	return true
}

// Close stops the listeners Serve accepts on, closes every connection and
// releases the root directory.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	lis := s.lis
	conns := slices.Collect(maps.Keys(s.conns))
	s.mu.Unlock()
	for _, l := range lis {
		l.Close()
	}
	for _, c := range conns {
		c.nc.Close()
	}
	s.purgeParked()
	s.fsClose()
	return nil
}

// newSessionID reserves an id for a session being set up.
func (s *Server) newSessionID() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	return s.nextID
}

// register adds an authenticated session to the server's table, and logs
// off the session it replaces (a client reconnecting names its old one).
func (s *Server) register(ss *session, previous uint64) {
	s.mu.Lock()
	old := s.sessions[previous]
	s.sessions[ss.id] = ss
	s.mu.Unlock()
	if old != nil && old != ss && old.user == ss.user {
		old.conn.expireSession(old)
	}
}

func (s *Server) unregister(ss *session) {
	s.mu.Lock()
	if s.sessions[ss.id] == ss {
		delete(s.sessions, ss.id)
	}
	s.mu.Unlock()
}

// quote escapes a peer's string for a log line.
func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return strconv.Quote(s)
}
