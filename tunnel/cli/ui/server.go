// Package ui is plug ui: a page, served by the CLI on loopback, showing
// a profile's agent, who is plugged in, the people let in and the audit
// trail, read with the profile's key over the questions plug who, plug
// end, plug members and plug doctor ask (Agent), so that the page has
// exactly the rights of the CLI.
//
// Safe by construction: every asset is embedded; every response carries
// a strict Content Security Policy (no inline script or style); requests
// whose Host is not the listener's address (DNS rebinding) or whose
// Origin is another site's are refused; data is served only with the
// random token of this start, and state changes only by POST with the
// token in a header (guard.go).
package ui

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"time"

	"plug/tunnel"
)

// Agent is what the page asks the profile's agent, with the profile's
// key: the functions of package tunnel of the same names.
type Agent interface {
	Who(ctx context.Context) ([]tunnel.Plugged, bool, error)
	End(ctx context.Context, run, reason string) (tunnel.Ended, error)
	Members(ctx context.Context, op, key, reason string) (tunnel.MemberList, string, error)
	Status(ctx context.Context) (*tunnel.Diagnosis, error)
	SearchAudit(ctx context.Context, q tunnel.AuditQuery) ([]tunnel.AuditEvent, error)
}

// Info is what the page says of the profile itself.
type Info struct {
	Profile string `json:"profile"`
	Host    string `json:"host"` // the agent's address as the profile reaches it
	Port    int    `json:"port"`
	HostKey string `json:"host_key"` // the pinned host key's fingerprint
	Key     string `json:"key"`      // the profile key's fingerprint
	User    string `json:"user"`     // the account the profile asks as
}

// Server serves the page of one profile.
type Server struct {
	agent Agent
	info  Info
	token string
	hosts []string // the Host headers the page is served under
	hub   *hub
}

// New returns the server of the page of info's profile, asking agent,
// with a token of its own.
func New(agent Agent, info Info) (*Server, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	s := &Server{agent: agent, info: info, token: base64.RawURLEncoding.EncodeToString(b)}
	s.hub = newHub(s)
	return s, nil
}

// URL is the page's address on l, with the token (in the fragment, which
// a browser never sends).
func (s *Server) URL(l net.Listener) string {
	return "http://" + l.Addr().String() + "/#" + s.token
}

// Serve serves the page on l, which must be a loopback address, until
// ctx ends.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok || !addr.IP.IsLoopback() {
		return errors.New("the page is served on a loopback address only")
	}
	s.hosts = allowedHosts(addr)
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go s.hub.run(ctx)
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	err := srv.Serve(l)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// Handler is the page's routes, behind the guard.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /", assets())
	mux.HandleFunc("GET /api/events", s.tokened(s.events))
	mux.HandleFunc("GET /api/audit", s.tokened(s.audit))
	mux.HandleFunc("POST /api/end", s.tokened(s.end))
	mux.HandleFunc("POST /api/members", s.tokened(s.members))
	return s.guard(mux)
}
