//go:build linux

package smb_test

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"plug/tunnel/clustertest"
)

// TestDurableReconnectTorture has smbtorture open files durably, take
// byte-range locks and move the file position, cut its TCP connection
// (or log off, or replace its session from a new connection), and take
// the files back on a new connection and session: each subtest checks
// that the lock is still held (unlocking it succeeds), the position and
// a pending delete kept, and that an open another client's open has
// closed cannot be taken back.
func TestDurableReconnectTorture(t *testing.T) {
	startServer(t).mustPassTorture(t,
		"smb2.durable-open.open-oplock",
		"smb2.durable-open.reopen1",
		"smb2.durable-open.reopen1a",
		"smb2.durable-open.reopen2",
		"smb2.durable-open.reopen2a",
		"smb2.durable-open.reopen3",
		"smb2.durable-open.reopen4",
		"smb2.durable-open.delete_on_close1",
		"smb2.durable-open.delete_on_close2",
		"smb2.durable-open.file-position",
		"smb2.durable-open.oplock",
		"smb2.durable-open.lock-oplock",
		"smb2.durable-open.open2-oplock",
		"smb2.durable-v2-open.create-blob",
		"smb2.durable-v2-open.open-oplock",
		"smb2.durable-v2-open.reopen1a",
		"smb2.durable-v2-open.reopen2",
		"smb2.durable-v2-open.reopen2b",
		"smb2.durable-v2-open.reopen2c",
	)
}

// durableOpen is an impacket script that opens name with a batch oplock
// and a durable v2 request for timeoutMs as fid, takes an exclusive lock
// on its first byte and prints the FileId. durableExit then leaves
// without closing anything: the process exits and its TCP connection is
// cut.
const durableOpen = `
import os, struct
from impacket.smb3structs import *
from impacket.nt_errors import STATUS_SUCCESS
guid = bytes(range(16))
def ctx(name, data):
    c = SMB2CreateContext()
    c['NameOffset'], c['NameLength'] = 16, 4
    c['DataOffset'], c['DataLength'] = 24, len(data)
    c['Buffer'] = name + b'\0' * 4 + data
    return c
s = conn.getSMBServer()
tid = conn.connectTree(share)
fid = s.create(tid, %q, FILE_READ_DATA | FILE_WRITE_DATA, 0, FILE_NON_DIRECTORY_FILE, FILE_OVERWRITE_IF, 0,
    oplockLevel=SMB2_OPLOCK_LEVEL_BATCH, createContexts=[ctx(b'DH2Q', struct.pack('<LLQ', %d, 0, 0) + guid)])
lock = SMB2_LOCK_ELEMENT()
lock['Offset'], lock['Length'], lock['Flags'] = 0, 1, SMB2_LOCKFLAG_EXCLUSIVE_LOCK | SMB2_LOCKFLAG_FAIL_IMMEDIATELY
p = s.SMB_PACKET()
p['Command'], p['TreeID'] = SMB2_LOCK, tid
l = SMB2Lock()
l['FileID'], l['LockCount'], l['Locks'] = fid, 1, lock.getData()
p['Data'] = l
if not s.recvSMB(s.sendSMB(p)).isValidAnswer(STATUS_SUCCESS):
    raise SystemExit('lock refused')
print('fid', fid.hex(), flush=True)
`

const durableExit = `
os._exit(0)
`

// durableUnlock is an impacket script that unlocks the first byte of the
// reconnected open h and prints "unlocked", or the error.
const durableUnlock = `
lock = SMB2_LOCK_ELEMENT()
lock['Offset'], lock['Length'], lock['Flags'] = 0, 1, SMB2_LOCKFLAG_UNLOCK
p = s.SMB_PACKET()
p['Command'], p['TreeID'] = SMB2_LOCK, tid
l = SMB2Lock()
l['FileID'], l['LockCount'], l['Locks'] = h, 1, lock.getData()
p['Data'] = l
try:
    s.recvSMB(s.sendSMB(p)).isValidAnswer(STATUS_SUCCESS)
    print('unlocked')
except Exception as e:
    print('unlock', e)
`

// durableReconnect is an impacket script that reconnects to the durable
// v2 open with FileId %s (hex) and prints "back", or the error.
const durableReconnect = `
import struct
from impacket.smb3structs import *
from impacket.nt_errors import STATUS_SUCCESS
guid = bytes(range(16))
c = SMB2CreateContext()
c['NameOffset'], c['NameLength'], c['DataOffset'] = 16, 4, 24
data = bytes.fromhex(%q) + guid + struct.pack('<L', 0)
c['DataLength'] = len(data)
c['Buffer'] = b'DH2C' + b'\0' * 4 + data
s = conn.getSMBServer()
tid = conn.connectTree(share)
try:
    h = s.create(tid, 'ignored', 0, 0, 0, 0, 0, createContexts=[c])
    print('back')
except Exception as e:
    print('error', e)
    raise SystemExit(0)
`

// TestDurableScavenged checks that a durable open whose client does not
// come back within the timeout it asked for is closed (its lock with
// it), and can no longer be reconnected to.
func TestDurableScavenged(t *testing.T) {
	s := startServer(t)
	out := s.mustImpacket(t, fmt.Sprintf(durableOpen, "parked.txt", 1000)+durableExit)
	fid := strings.TrimSpace(strings.TrimPrefix(lastLine([]byte(out)), "fid"))
	if len(fid) != 32 {
		t.Fatalf("no FileId from the durable open:\n%s", out)
	}
	clustertest.Eventually(t, 30*time.Second, "the parked open closed after its 1 s timeout", func() error {
		if !strings.Contains(s.log.text(), `a durable open closed: its client did not come back within 1s`) {
			return fmt.Errorf("not in the log:\n%s", s.log.text())
		}
		return nil
	})
	if out := s.mustImpacket(t, fmt.Sprintf(durableReconnect, fid)); !strings.Contains(out, "STATUS_OBJECT_NAME_NOT_FOUND") {
		t.Errorf("a reconnect after the timeout: want STATUS_OBJECT_NAME_NOT_FOUND, got:\n%s", out)
	}
}

// TestDurableReconnectKeepsLock checks that a client cut off with a file
// open and a lock held takes both back on a new connection within the
// timeout, and that the lock is still its own: unlocking it succeeds.
func TestDurableReconnectKeepsLock(t *testing.T) {
	s := startServer(t)
	out := s.mustImpacket(t, fmt.Sprintf(durableOpen, "kept.txt", 300000)+durableExit)
	fid := strings.TrimSpace(strings.TrimPrefix(lastLine([]byte(out)), "fid"))
	if len(fid) != 32 {
		t.Fatalf("no FileId from the durable open:\n%s", out)
	}
	out = s.mustImpacket(t, fmt.Sprintf(durableReconnect, fid)+durableUnlock)
	if !strings.Contains(out, "back\nunlocked") {
		t.Errorf("reconnect and unlock of the lock held before the cut: want back and unlocked, got:\n%s", out)
	}
}

// TestDurableSurvivesCutConnection: a client whose TCP connection is cut
// (reset) by the network between it and the server, with a file open
// durably, data written and a lock held, connects again from the same
// process, takes the open back, reads what it wrote through it and
// unlocks its lock.
func TestDurableSurvivesCutConnection(t *testing.T) {
	s := startServer(t)
	proxy := newCutProxy(t, s.addr)
	// The client reaches the server through the proxy; it asks the proxy
	// to cut its connections by connecting to cutPort, and waits for that.
	via := *s
	via.port = proxy.port
	out := via.mustImpacket(t, fmt.Sprintf(durableOpen, "cut.txt", 60000)+fmt.Sprintf(`
s.write(tid, fid, b'written before the cut', 0, 22)
import socket
socket.create_connection(('127.0.0.1', %s)).recv(1)
try:
    s.read(tid, fid, 0, 10)
    print('the old connection still works')
except Exception:
    print('cut')
conn = SMBConnection('127.0.0.1', '127.0.0.1', sess_port=%s)
conn.login(%q, %q)
`, proxy.cutPort, proxy.port, testUser, testPass)+strings.Replace(durableReconnect, "%q", "fid.hex()", 1)+`
print('read', s.read(tid, h, 0, 100))
`+durableUnlock)
	if !strings.Contains(out, "cut\nback\nread b'written before the cut'\nunlocked") {
		t.Fatalf("after the cut: want cut, back, the data written and unlocked, got:\n%s", out)
	}
	if n := proxy.cuts(); n != 1 {
		t.Fatalf("the proxy cut %d connections, want the client's one", n)
	}
}

// cutProxy forwards TCP connections on a port of its own to a server,
// and cuts (resets) all of them when a connection comes to its cutPort.
type cutProxy struct {
	port, cutPort string
	mu            sync.Mutex
	conns         []net.Conn
	cut           int
}

func newCutProxy(t *testing.T, to string) *cutProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(); cl.Close() })
	p := &cutProxy{}
	_, p.port, _ = net.SplitHostPort(l.Addr().String())
	_, p.cutPort, _ = net.SplitHostPort(cl.Addr().String())
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	go func() {
		for {
			c, err := cl.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			for _, x := range p.conns {
				x.(*net.TCPConn).SetLinger(0) // a reset, as a dropped link ends
				x.Close()
			}
			p.cut += len(p.conns) / 2
			p.conns = nil
			p.mu.Unlock()
			c.Close()
		}
	}()
	return p
}

// cuts is how many proxied connections were cut.
func (p *cutProxy) cuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}
