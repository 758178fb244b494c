//go:build linux

package smb_test

import (
	"fmt"
	"strings"
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
// and a durable v2 request for timeoutMs, takes an exclusive lock on its
// first byte, prints the FileId and leaves without closing anything: the
// process exits and its TCP connection is cut.
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
os._exit(0)
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
	out := s.mustImpacket(t, fmt.Sprintf(durableOpen, "parked.txt", 1000))
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
	out := s.mustImpacket(t, fmt.Sprintf(durableOpen, "kept.txt", 300000))
	fid := strings.TrimSpace(strings.TrimPrefix(lastLine([]byte(out)), "fid"))
	if len(fid) != 32 {
		t.Fatalf("no FileId from the durable open:\n%s", out)
	}
	out = s.mustImpacket(t, fmt.Sprintf(durableReconnect, fid)+`
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
`)
	if !strings.Contains(out, "back\nunlocked") {
		t.Errorf("reconnect and unlock of the lock held before the cut: want back and unlocked, got:\n%s", out)
	}
}
