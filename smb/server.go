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
	handshakeTimeout = 30 * time.Second
)

// Server serves one directory as one share. Its methods are safe for
// concurrent use.
type Server struct {
	cfg   Config
	root  *rootFS
	creds *ntlm.Credentials
	guid  [16]byte
	start time.Time
	slots chan struct{} // one per connection served

	mu       sync.Mutex
	conns    map[*conn]struct{}
	sessions map[uint64]*session // every authenticated session, for reconnects
	nextID   uint64              // session ids
	closed   bool
	lis      []net.Listener

	files   fileTable
	watches watches
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
		slots:    make(chan struct{}, cfg.MaxConns),
		conns:    map[*conn]struct{}{},
		sessions: map[uint64]*session{},
	}
	s.files.init()
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
	select {
	case s.slots <- struct{}{}:
	default:
		s.logf("smb: connection from %s refused: %d connections are served already", nc.RemoteAddr(), s.cfg.MaxConns)
		nc.Close()
		return
	}
	defer func() { <-s.slots }()
	c := newConn(s, nc)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		nc.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	c.serve()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
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
