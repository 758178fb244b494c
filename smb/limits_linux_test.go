//go:build linux

package smb_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// vmHWM is the peak resident memory of process pid, in bytes, as
// /proc/PID/status gives it.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		var kb int64
		if _, err := fmt.Sscanf(line, "VmHWM: %d kB", &kb); err == nil {
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// compoundReads is an impacket script that logs on over SMB 2.1 (signed,
// not encrypted), opens the file "big", asks for the most credits, and
// sends one compound frame of n signed READs of 1 MiB each; it prints how
// many responses came back, how many succeeded and the bytes they held.
const compoundReads = `
import struct, hmac, hashlib
from impacket.smb3structs import SMB2_DIALECT_21
user, password = conn._SMBConnection._Session['UserCredentials'][:2]
c = SMBConnection('127.0.0.1', '127.0.0.1', sess_port=conn._sess_port, preferredDialect=SMB2_DIALECT_21)
c.login(user, password)
tid = c.connectTree(share)
fid = c.openFile(tid, 'big', desiredAccess=1)
s = c._SMBConnection
key, sid = s._Session['SessionKey'], s._Session['SessionID']
mid = s._Connection['SequenceWindow']
sock = s._NetBIOSSession.get_socket()
sock.settimeout(120)

def message(cmd, mid, charge, credits, body, nxt=0):
    h = struct.pack('<4sHHIHHIIQIIQ16s', b'\xfeSMB', 64, charge, 0, cmd, credits, 8, nxt, mid, 0, tid, sid, b'\0' * 16)
    m = bytearray(h + body)
    if nxt:
        m += b'\0' * (nxt - len(m))
    m[48:64] = hmac.new(key, bytes(m), hashlib.sha256).digest()[:16]
    return bytes(m)

def send(msg):
    sock.sendall(len(msg).to_bytes(4, 'big') + msg)

def recvn(n):
    b = bytearray()
    while len(b) < n:
        chunk = sock.recv(min(n - len(b), 1 << 20))
        if not chunk:
            raise EOFError('the server closed the connection')
        b += chunk
    return bytes(b)

def frame():
    return recvn(int.from_bytes(recvn(4)[1:], 'big'))

send(message(13, mid, 1, 8000, struct.pack('<HH', 4, 0)))
echo = frame()
print('echo status %#x credits %d' % struct.unpack_from('<IxxH', echo, 8))
mid += 1
n = N_READS
chain = b''
for i in range(n):
    body = struct.pack('<HBBIQ16sIIIHHB', 49, 0x50, 0, 1 << 20, 0, fid, 0, 0, 0, 0, 0, 0)
    chain += message(8, mid + 16 * i, 16, 16, body, 0 if i == n - 1 else 120)
print('compound frame', len(chain), 'bytes')
send(chain)
got = ok = data = 0
while got < n:
    f, off = frame(), 0
    while True:
        m = f[off:]
        if m[:4] != b'\xfeSMB':
            raise ValueError('not an SMB2 response')
        status, nxt = struct.unpack_from('<I', m, 8)[0], struct.unpack_from('<I', m, 20)[0]
        got += 1
        if status == 0:
            ok += 1
            data += struct.unpack_from('<I', m, 68)[0]
        if nxt == 0:
            break
        off += nxt
print('responses', got, 'ok', ok, 'bytes', data)
`

// TestCompoundReadsMemory sends one signed compound frame of 360 READs of
// 1 MiB (43 KB on the wire) to a server running as its own process: every
// read is answered, and the server's peak resident memory stays under
// 64 MiB (the responses are not all built in one buffer).
func TestCompoundReadsMemory(t *testing.T) {
	s, pid := startServerProcess(t)
	f, err := os.Create(filepath.Join(s.dir, "big"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	const n = 360
	before := vmHWM(t, pid)
	out, err := s.impacket(t, strings.ReplaceAll(compoundReads, "N_READS", fmt.Sprint(n)))
	peak := vmHWM(t, pid)
	t.Logf("server peak RSS (VmHWM) %.1f MiB before, %.1f MiB after one compound of %d 1-MiB reads\n%s", float64(before)/(1<<20), float64(peak)/(1<<20), n, out)
	if peak >= 64<<20 {
		t.Errorf("the server's peak RSS reached %.1f MiB, not under 64 MiB", float64(peak)/(1<<20))
	}
	if err != nil {
		t.Fatalf("the compound of reads: %v\n%s", err, out)
	}
	if want := fmt.Sprintf("responses %d ok %d bytes %d", n, n, n<<20); !strings.Contains(out, want) {
		t.Fatalf("not every read was answered with its MiB (want %q):\n%s", want, out)
	}
}

// TestIdleConnections opens 32 connections that never log on: a client
// still logs on at once, all but the 8 newest idle ones are closed at
// once, and those within the 10 s a connection has to log on.
func TestIdleConnections(t *testing.T) {
	s := startServer(t)
	start := time.Now()
	idle := make([]net.Conn, 32)
	for i := range idle {
		c, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle[i] = c
	}
	s.mustSmbclient(t, t.TempDir(), "ls")
	loggedOn := time.Since(start)
	// Each idle connection is closed: read sees it end.
	closedAt := make([]time.Duration, len(idle))
	for i, c := range idle {
		c.SetReadDeadline(start.Add(60 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || os.IsTimeout(err) {
			t.Fatalf("idle connection %d: still open after 60 s (%v)", i, err)
		}
		closedAt[i] = time.Since(start)
	}
	t.Logf("smbclient logged on after %v; the idle connections were closed after %v", loggedOn, closedAt)
	for i, at := range closedAt {
		if at > 20*time.Second {
			t.Errorf("idle connection %d was closed after %v, not within the 10 s to log on", i, at)
		}
	}
	if n := strings.Count(s.log.text(), "waiting to log on, it waited longest"); n < 24 {
		t.Errorf("%d idle connections were closed to make room, not at least 24:\n%s", n, s.log.text())
	}
}

// TestLoggedOnCap logs on 32 connections and keeps them: a 33rd logon is
// refused with STATUS_REQUEST_NOT_ACCEPTED, and once one leaves, another
// logs on.
func TestLoggedOnCap(t *testing.T) {
	s := startServer(t)
	out := s.mustImpacket(t, `
user, password = conn._SMBConnection._Session['UserCredentials'][:2]
def logon():
    c = SMBConnection('127.0.0.1', '127.0.0.1', sess_port=conn._sess_port)
    c.login(user, password)
    return c
held = [conn] + [logon() for _ in range(31)]
print('held', len(held))
try:
    logon()
    print('33rd logged on')
except SessionError as e:
    print('33rd refused', e.getErrorString()[0])
held.pop().close()
held.append(logon())
print('after one left', held[-1].listPath(share, '*')[0].get_longname())
`)
	if !strings.Contains(out, "held 32") || !strings.Contains(out, "33rd refused STATUS_REQUEST_NOT_ACCEPTED") || !strings.Contains(out, "after one left .") {
		t.Fatalf("32 connections logged on, then a 33rd:\n%s", out)
	}
	if !strings.Contains(s.log.text(), "refused: 32 connections are logged on already") {
		t.Errorf("the refused logon was not logged:\n%s", s.log.text())
	}
}
