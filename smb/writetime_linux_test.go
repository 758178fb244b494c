//go:build linux

package smb_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStickyWriteTime: a write time a client sets on an open (as Explorer
// and copy tools do when they copy a file) is kept when more data is
// written through that open, on disk too.
func TestStickyWriteTime(t *testing.T) {
	s := startServer(t)
	set := time.Date(2020, 2, 3, 4, 5, 6, 0, time.UTC)
	out := s.mustImpacket(t, `
import struct
from impacket.smb3structs import FILE_READ_DATA, FILE_WRITE_DATA, FILE_WRITE_ATTRIBUTES, FILE_OVERWRITE_IF
tid = conn.connectTree(share)
fid = conn.createFile(tid, 'copied.txt', desiredAccess=FILE_READ_DATA | FILE_WRITE_DATA | FILE_WRITE_ATTRIBUTES, creationDisposition=FILE_OVERWRITE_IF)
conn.writeFile(tid, fid, b'first part ')
filetime = (1580702706 + 11644473600) * 10000000
conn._SMBConnection.setInfo(tid, fid, struct.pack('<qqqqI4x', 0, 0, filetime, 0, 0), infoType=1, fileInfoClass=4)
conn.writeFile(tid, fid, b'second part', offset=11)
conn.closeFile(tid, fid)
print('done')
`)
	if !strings.Contains(out, "done") {
		t.Fatalf("impacket: %s", out)
	}
	st, err := os.Stat(filepath.Join(s.dir, "copied.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !st.ModTime().Equal(set) {
		t.Errorf("the file's mtime is %v after a write through the open that set it to %v", st.ModTime().UTC(), set)
	}
}

// TestWriteTimeTorture runs smbtorture's timestamps subtests of the write
// time Windows moves late.
func TestWriteTimeTorture(t *testing.T) {
	startServer(t).mustPassTorture(t, "smb2.timestamps.delayed-write-vs-seteof", "smb2.timestamps.delayed-write-vs-flush",
		"smb2.timestamps.delayed-write-vs-setbasic", "smb2.timestamps.delayed-1write", "smb2.timestamps.delayed-2write")
}
