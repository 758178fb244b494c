//go:build linux

package smb_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestShortNamesAndEAs: every name has an 8.3 short name that is told and
// opens the file (in any case); extended attributes a client sets are kept in user
// xattrs and read back.
func TestShortNamesAndEAs(t *testing.T) {
	s := startServer(t)
	os.WriteFile(filepath.Join(s.dir, "readme first.txt"), []byte("long name"), 0644)
	os.WriteFile(filepath.Join(s.dir, "short.txt"), []byte("short name"), 0644)
	local := t.TempDir()
	// smbclient's allinfo fails after the altname on the streams it asks for
	// in the SMB1 way; the altname line comes first.
	info, _ := s.smbclient(t, local, `allinfo "readme first.txt"; allinfo short.txt`)
	var alts []string
	for _, l := range strings.Split(info, "\n") {
		if a, ok := strings.CutPrefix(l, "altname: "); ok {
			alts = append(alts, strings.TrimSpace(a))
		}
	}
	if len(alts) != 2 || alts[1] != "SHORT.TXT" || !strings.HasSuffix(alts[0], "~1.TXT") || !strings.HasPrefix(alts[0], "RE") {
		t.Fatalf("the short names told are %q:\n%s", alts, info)
	}
	out := s.mustImpacket(t, `
import struct
from impacket.smb3structs import FILE_READ_DATA, FILE_WRITE_EA, FILE_READ_EA
def get(name):
    buf = io.BytesIO(); conn.getFile(share, name, buf.write); return buf.getvalue().decode()
print('by short name', get('`+strings.ToLower(alts[0])+`'))
tid = conn.connectTree(share)
fid = conn.createFile(tid, 'short.txt', desiredAccess=FILE_READ_DATA | FILE_WRITE_EA | FILE_READ_EA)
name, value = b'Origin', b'laptop'
ea = struct.pack('<IBBH', 0, 0, len(name), len(value)) + name + b'\0' + value
conn._SMBConnection.setInfo(tid, fid, ea, infoType=1, fileInfoClass=15)
raw = conn._SMBConnection.queryInfo(tid, fid, infoType=1, fileInfoClass=15)
print('ea', raw[8:].split(b'\0')[0].decode(), raw[-len(value):].decode())
conn.closeFile(tid, fid)
`)
	if !strings.Contains(out, "by short name long name\n") {
		t.Errorf("the short name does not open the file:\n%s", out)
	}
	if !strings.Contains(out, "ea ORIGIN laptop\n") {
		t.Errorf("the EA set was not read back:\n%s", out)
	}
	buf := make([]byte, 64)
	n, err := unix.Getxattr(filepath.Join(s.dir, "short.txt"), "user.plug.ea.ORIGIN", buf)
	if err != nil || string(buf[:n]) != "laptop" {
		t.Errorf("the EA's xattr on disk: %q, %v", buf[:max(n, 0)], err)
	}
}

// TestGetinfoTorture runs smbtorture's getinfo subtests that need short
// names and EAs.
func TestGetinfoTorture(t *testing.T) {
	startServer(t).mustPassTorture(t, "smb2.getinfo.getinfo_access", "smb2.getinfo.qfile_buffercheck")
}
