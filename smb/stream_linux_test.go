//go:build linux

package smb_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestStreams: a named stream a client writes is kept in a user xattr of
// its file, read back, listed beside the file's data, and dropped when the
// file is overwritten.
func TestStreams(t *testing.T) {
	s := startServer(t)
	local := t.TempDir()
	os.WriteFile(filepath.Join(local, "meta"), []byte("where it came from"), 0644)
	os.WriteFile(filepath.Join(local, "data"), []byte("the file's data"), 0644)
	s.mustSmbclient(t, local, `put data f.txt; put meta "f.txt:Zone.Identifier"; get "F.TXT:zone.identifier" back`)
	if b, _ := os.ReadFile(filepath.Join(local, "back")); string(b) != "where it came from" {
		t.Errorf("the stream read back holds %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(s.dir, "f.txt")); string(b) != "the file's data" {
		t.Errorf("the file's data is %q after a stream was written", b)
	}
	buf := make([]byte, 100)
	n, err := unix.Getxattr(filepath.Join(s.dir, "f.txt"), "user.plug.stream.Zone.Identifier", buf)
	if err != nil || string(buf[:n]) != "where it came from" {
		t.Errorf("the stream's xattr on disk: %q, %v", buf[:max(n, 0)], err)
	}
	out := s.mustImpacket(t, `
tid = conn.connectTree(share)
fid = conn.openFile(tid, 'f.txt')
raw = conn._SMBConnection.queryInfo(tid, fid, infoType=1, fileInfoClass=22)
print(repr(raw.decode('utf-16-le', 'replace')))
`)
	if !strings.Contains(out, ":Zone.Identifier:$DATA") || !strings.Contains(out, "::$DATA") {
		t.Errorf("FileStreamInformation does not list both streams:\n%s", out)
	}
	// Overwriting the file drops its streams.
	s.mustSmbclient(t, local, `put data f.txt`)
	if out, _ := s.smbclient(t, local, `get "f.txt:Zone.Identifier" gone`); !strings.Contains(out, "NT_STATUS_OBJECT_NAME_NOT_FOUND") {
		t.Errorf("the stream outlived an overwrite of its file:\n%s", out)
	}
	for _, bad := range []string{"f.txt:bad:$FOO", "f.txt:" + strings.Repeat("s", 239)} {
		if out, _ := s.smbclient(t, local, `put data "`+bad+`"`); !strings.Contains(out, "NT_STATUS_OBJECT_NAME_INVALID") {
			t.Errorf("the stream %.20q... was taken:\n%s", bad, out)
		}
	}
}

// TestStreamsTorture runs smbtorture's streams subtests and the others
// that need named streams.
func TestStreamsTorture(t *testing.T) {
	startServer(t).mustPassTorture(t, "smb2.streams.dir", "smb2.streams.io", "smb2.streams.sharemodes", "smb2.streams.names",
		"smb2.streams.names2", "smb2.streams.names3", "smb2.streams.rename", "smb2.streams.rename2",
		"smb2.streams.create-disposition", "smb2.streams.attributes1", "smb2.streams.attributes2",
		"smb2.streams.zero-byte", "smb2.streams.basefile-rename-with-open-stream",
		"smb2.getinfo.normalized", "smb2.ioctl.copy-chunk streams", "smb2.compound.compound-padding")
}
