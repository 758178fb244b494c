//go:build !linux

package smb

import "net"

// Server is an SMB server; on this platform New always fails.
type Server struct{}

// New returns ErrUnsupported on this platform.
func New(cfg Config) (*Server, error) { return nil, ErrUnsupported }

// Serve returns ErrUnsupported on this platform.
func (s *Server) Serve(l net.Listener) error { return ErrUnsupported }

// ServeConn closes c on this platform.
func (s *Server) ServeConn(c net.Conn) { c.Close() }

// Close does nothing on this platform.
func (s *Server) Close() error { return nil }
