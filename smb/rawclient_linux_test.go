//go:build linux

package smb

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"plug/smb/internal/wire"
	"plug/tunnel/clustertest"
)

// rawClient is a client of one connection of a server in this process,
// over TCP on loopback, logged on as loggedOn leaves it: it sends bare
// SMB2 requests, unsigned, and reads their responses.
type rawClient struct {
	t   *testing.T
	nc  net.Conn
	c   *conn // the server's end
	mid uint64
	// early are responses read before they were waited for, by message
	// id: status and body.
	early map[uint64]rawResponse
}

type rawResponse struct {
	status uint32
	body   []byte
}

// rawServer is a server of a fresh directory for rawClients.
func rawServer(t *testing.T) *Server {
	t.Helper()
	s, err := New(Config{Share: "share", Dir: t.TempDir(), User: "user", Password: "password"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// dialRaw connects a rawClient to s, served until the test ends.
func dialRaw(t *testing.T, s *Server) *rawClient {
	t.Helper()
	nc, server := clustertest.TCPPair(t)
	c := newConn(s, server)
	loggedOn(c)
	done := make(chan struct{})
	go func() {
		c.serve()
		close(done)
	}()
	t.Cleanup(func() {
		nc.Close()
		<-done
	})
	return &rawClient{t: t, nc: nc, c: c, early: map[uint64]rawResponse{}}
}

// send sends a request of command cmd with body on session 1 and tree 1,
// and returns its message id.
func (rc *rawClient) send(cmd uint16, body []byte) uint64 {
	rc.t.Helper()
	rc.mid++
	msg := make([]byte, 4+wire.HeaderSize, 4+wire.HeaderSize+len(body))
	h := wire.Header{Command: cmd, Credits: 1, MessageID: rc.mid, TreeID: 1, SessionID: 1}
	h.Put(msg[4:])
	msg = append(msg, body...)
	wire.PutFrameHeader(msg, len(msg)-4)
	rc.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := rc.nc.Write(msg); err != nil {
		rc.t.Fatal(err)
	}
	return rc.mid
}

// reply returns the status and body of the first response to message
// mid (an interim one included), reading responses until it comes; those
// to other messages are kept for their turn.
func (rc *rawClient) reply(mid uint64) (uint32, []byte) {
	rc.t.Helper()
	if r, ok := rc.early[mid]; ok {
		delete(rc.early, mid)
		return r.status, r.body
	}
	for {
		rc.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := wire.FrameLen(rc.nc, maxFrame)
		if err != nil {
			rc.t.Fatalf("no response to message %d: %v", mid, err)
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(rc.nc, b); err != nil {
			rc.t.Fatalf("no response to message %d: %v", mid, err)
		}
		h, err := wire.ParseHeader(b)
		if err != nil {
			rc.t.Fatalf("a response that does not parse: %v", err)
		}
		if h.MessageID == mid {
			return h.Status, b[wire.HeaderSize:]
		}
		if _, ok := rc.early[h.MessageID]; !ok {
			rc.early[h.MessageID] = rawResponse{h.Status, b[wire.HeaderSize:]}
		}
	}
}

// create opens name ('\'-separated) for all access, sharing all, with
// the disposition disp and the create options opts, and returns its
// FileId.
func (rc *rawClient) create(name string, disp, opts uint32) [16]byte {
	rc.t.Helper()
	st, body := rc.open(name, fileAllAccess, disp, opts)
	if st != wire.StatusSuccess || len(body) < 80 {
		rc.t.Fatalf("create %s: status %#x", name, st)
	}
	return [16]byte(body[64:80])
}

// open sends a CREATE of name for access, sharing all, with the
// disposition disp and the create options opts, and returns the status
// and body of its response.
func (rc *rawClient) open(name string, access, disp, opts uint32) (uint32, []byte) {
	rc.t.Helper()
	le := binary.LittleEndian
	u := wire.AppendUTF16(nil, name)
	b := le.AppendUint16(nil, 57)
	b = append(b, 0, 0)       // security flags, oplock
	b = le.AppendUint32(b, 2) // impersonation
	b = append(b, make([]byte, 16)...)
	b = le.AppendUint32(b, access)
	b = le.AppendUint32(b, 0)
	b = le.AppendUint32(b, shareRead|shareWrite|shareDelete)
	b = le.AppendUint32(b, disp)
	b = le.AppendUint32(b, opts)
	b = le.AppendUint16(b, wire.HeaderSize+56)
	b = le.AppendUint16(b, uint16(len(u)))
	b = le.AppendUint64(b, 0) // no create contexts
	b = append(b, u...)
	return rc.reply(rc.send(wire.Create, b))
}
