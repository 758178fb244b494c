//go:build linux

package smb

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"plug/smb/internal/sign"
	"plug/smb/internal/wire"
	"plug/tunnel/clustertest"
)

func FuzzParseCreate(f *testing.F) {
	f.Fuzz(func(t *testing.T, msg []byte) {
		if len(msg) < wire.HeaderSize {
			return
		}
		q, status := parseCreate(msg)
		if status == wire.StatusSuccess {
			parseName(q.name)
		}
	})
}

func FuzzParseName(f *testing.F) {
	for _, s := range []string{"a\x00", "a\x00\\\x00b\x00", ".\x00.\x00", "a\x00:\x00:\x00$\x00D\x00A\x00T\x00A\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, _, _, status := parseName(raw)
		if status != wire.StatusSuccess {
			return
		}
		// What passes names a path beneath the root: no component leads
		// up or is empty.
		if p != "" {
			for _, c := range splitAll(p) {
				if c == "" || c == "." || c == ".." {
					t.Fatalf("%x gave the path %q", raw, p)
				}
			}
		}
	})
}

func splitAll(p string) []string {
	var out []string
	for {
		d, b := splitPath(p)
		out = append(out, b)
		if d == "" {
			return out
		}
		p = d
	}
}

var (
	fuzzOnce sync.Once
	fuzzSrv  *Server
)

func fuzzServer(f *testing.F) *Server {
	fuzzOnce.Do(func() {
		s, err := New(Config{Share: "share", Dir: f.TempDir(), User: "user", Password: "password"})
		if err != nil {
			f.Fatal(err)
		}
		fuzzSrv = s
	})
	return fuzzSrv
}

// serveStream runs one connection of s over a pipe: c (set up by setup,
// if any) reads stream as the client's bytes; responses are discarded. It
// fails when the connection does not end once the client has gone.
func serveStream(t *testing.T, s *Server, stream []byte, setup func(*conn)) {
	client, server := net.Pipe()
	c := newConn(s, server)
	if setup != nil {
		setup(c)
	}
	done := make(chan struct{})
	go func() {
		c.serve()
		close(done)
	}()
	go io.Copy(io.Discard, client)
	client.SetWriteDeadline(time.Now().Add(5 * time.Second))
	client.Write(stream)
	client.Close()
	select {
	case <-done:
	case <-time.After(clustertest.Settle):
		t.Fatalf("the connection did not end after its client left")
	}
}

// FuzzConn feeds a client's byte stream to a connection from its start:
// NEGOTIATE, SESSION_SETUP and whatever follows.
func FuzzConn(f *testing.F) {
	s := fuzzServer(f)
	f.Fuzz(func(t *testing.T, stream []byte) {
		serveStream(t, s, stream, nil)
	})
}

// FuzzRequests feeds requests to a connection that has negotiated 3.1.1
// and holds an unsigned session (id 1) with a tree connect (id 1) to the
// share: the file operations on a real directory.
func FuzzRequests(f *testing.F) {
	s := fuzzServer(f)
	f.Fuzz(func(t *testing.T, stream []byte) {
		serveStream(t, s, stream, loggedOn)
	})
}

// loggedOn gives the connection c, before it serves, what NEGOTIATE
// (3.1.1), a logon (session 1, unsigned) and a tree connect to the share
// (tree 1) would, and the whole credit window.
func loggedOn(c *conn) {
	c.negotiated, c.dialect, c.signAlg = true, wire.Dialect311, sign.AESCMAC
	c.credits.size = maxCredits
	ss := &session{conn: c, id: 1, state: sessionValid, trees: map[uint32]*tree{}}
	ss.trees[1] = &tree{id: 1, sess: ss}
	c.sessions[1] = ss
}
