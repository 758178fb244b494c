//go:build linux

package smb_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"plug/tunnel/clustertest"
)

// The smbclient option sets the tests run with: SMB 3.1.1 with signing
// required, and SMB 2.1.
var dialects = []struct {
	name string
	opts []string
}{
	{"SMB3_11 signed", []string{"--option=clientmaxprotocol=SMB3_11", "--option=clientsigning=required"}},
	{"SMB2_10", []string{"--option=clientmaxprotocol=SMB2_10"}},
}

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// TestSmbclient puts, gets, lists, makes directories, renames and deletes
// with smbclient, and checks the share's directory after each step.
func TestSmbclient(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			s := startServer(t)
			local := t.TempDir()
			data := randomBytes(1, 3<<20+12345)
			os.WriteFile(filepath.Join(local, "up.bin"), data, 0644)

			s.mustSmbclient(t, local, "put up.bin; mkdir sub; put up.bin sub\\copy.bin", d.opts...)
			if got, _ := os.ReadFile(filepath.Join(s.dir, "up.bin")); !bytes.Equal(got, data) {
				t.Fatalf("the file on disk has %d bytes, not the %d sent", len(got), len(data))
			}
			if got, _ := os.ReadFile(filepath.Join(s.dir, "sub", "copy.bin")); !bytes.Equal(got, data) {
				t.Fatalf("sub/copy.bin on disk is not what was sent")
			}
			if st, err := os.Stat(filepath.Join(s.dir, "sub")); err != nil || !st.IsDir() {
				t.Fatalf("mkdir made no directory: %v", err)
			}

			s.mustSmbclient(t, local, "get up.bin down.bin", d.opts...)
			if got, _ := os.ReadFile(filepath.Join(local, "down.bin")); !bytes.Equal(got, data) {
				t.Fatalf("get brought back %d bytes that are not the file", len(got))
			}

			s.mustSmbclient(t, local, "rename up.bin sub\\moved.bin", d.opts...)
			if _, err := os.Stat(filepath.Join(s.dir, "up.bin")); !os.IsNotExist(err) {
				t.Fatalf("the renamed file is still there: %v", err)
			}
			if got, _ := os.ReadFile(filepath.Join(s.dir, "sub", "moved.bin")); !bytes.Equal(got, data) {
				t.Fatalf("the renamed file is not at its new name")
			}
			out := s.mustSmbclient(t, local, "ls sub\\*", d.opts...)
			for _, name := range []string{"copy.bin", "moved.bin"} {
				if !strings.Contains(out, name) || !strings.Contains(out, fmt.Sprint(len(data))) {
					t.Fatalf("ls does not show %s of %d bytes:\n%s", name, len(data), out)
				}
			}

			s.mustSmbclient(t, local, "rm sub\\copy.bin; rm sub\\moved.bin; rmdir sub", d.opts...)
			if entries, _ := os.ReadDir(s.dir); len(entries) != 0 {
				t.Fatalf("the share still holds %v", entries)
			}
		})
	}
}

// TestEncrypted runs smbclient with encryption required: 3.0 (AES-128-CCM)
// and 3.1.1 (AES-128-GCM, then each cipher a client may insist on).
func TestEncrypted(t *testing.T) {
	s := startServer(t)
	local := t.TempDir()
	data := randomBytes(2, 2<<20+7)
	os.WriteFile(filepath.Join(local, "up.bin"), data, 0644)
	for _, opts := range [][]string{
		{"--option=clientmaxprotocol=SMB3_00"},
		{"--option=clientmaxprotocol=SMB3_11"},
		{"--option=client smb3 encryption algorithms=AES-128-CCM"},
		{"--option=client smb3 encryption algorithms=AES-256-GCM"},
		{"--option=client smb3 encryption algorithms=AES-256-CCM"},
	} {
		opts = append(opts, "--option=clientsmbencrypt=required")
		os.Remove(filepath.Join(local, "down.bin"))
		s.mustSmbclient(t, local, "put up.bin; get up.bin down.bin; rm up.bin", opts...)
		if got, _ := os.ReadFile(filepath.Join(local, "down.bin")); !bytes.Equal(got, data) {
			t.Fatalf("%v: the file came back different", opts)
		}
	}
}

// TestImpacket does the same file operations with impacket, which
// negotiates through an SMB1 NEGOTIATE and SMB 3.0.
func TestImpacket(t *testing.T) {
	s := startServer(t)
	out := s.mustImpacket(t, `
data = bytes(range(256)) * 4096
conn.putFile(share, 'imp.bin', io.BytesIO(data).read)
buf = io.BytesIO(); conn.getFile(share, 'imp.bin', buf.write)
assert buf.getvalue() == data, 'get returned other bytes'
conn.createDirectory(share, 'dir')
conn.rename(share, 'imp.bin', 'dir\\moved.bin')
names = sorted(f.get_longname() for f in conn.listPath(share, 'dir\\*'))
print('listed', names)
conn.deleteFile(share, 'dir\\moved.bin')
conn.deleteDirectory(share, 'dir')
print('dialect %#x' % conn.getDialect())
`)
	if !strings.Contains(out, "listed ['.', '..', 'moved.bin']") {
		t.Fatalf("impacket's listing:\n%s", out)
	}
	if entries, _ := os.ReadDir(s.dir); len(entries) != 0 {
		t.Fatalf("the share still holds %v", entries)
	}
}

// TestOwnership checks that what a client writes is owned by the uid and
// gid the server runs as: another than the test's own when the test runs
// as root.
func TestOwnership(t *testing.T) {
	uid, gid := os.Getuid(), os.Getgid()
	var s *server
	if uid == 0 {
		uid, gid = 4242, 4343
		s = startServerAs(t, uid, gid)
	} else {
		s = startServer(t)
	}
	local := t.TempDir()
	os.WriteFile(filepath.Join(local, "f.txt"), []byte("owned\n"), 0644)
	s.mustSmbclient(t, local, "mkdir d; put f.txt d\\f.txt; put f.txt g.txt", dialects[0].opts...)
	for _, p := range []string{"d", "d/f.txt", "g.txt"} {
		st, err := os.Lstat(filepath.Join(s.dir, p))
		if err != nil {
			t.Fatal(err)
		}
		sys := st.Sys().(*syscall.Stat_t)
		if int(sys.Uid) != uid || int(sys.Gid) != gid {
			t.Errorf("%s is owned by %d:%d, not the server's %d:%d", p, sys.Uid, sys.Gid, uid, gid)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(s.dir, "d", "f.txt")); string(got) != "owned\n" {
		t.Errorf("d/f.txt holds %q", got)
	}
}

// TestLargeFile puts and gets 1 GiB, signed on SMB 3.1.1.
func TestLargeFile(t *testing.T) {
	if testing.Short() {
		clustertest.Unavailable(t, "1 GiB each way; not with -short")
	}
	// In memory where there is a tmpfs: the test is of the server, not of
	// the disk.
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		t.Setenv("TMPDIR", "/dev/shm")
	}
	s := startServer(t)
	local := t.TempDir()
	const size = 1 << 30
	f, err := os.Create(filepath.Join(local, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	chunk := randomBytes(3, 8<<20)
	for n := 0; n < size; n += len(chunk) {
		chunk[0], chunk[1] = byte(n>>23), byte(n>>31)
		f.Write(chunk)
		h.Write(chunk)
	}
	f.Close()
	want := h.Sum(nil)
	sum := func(p string) []byte {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		h := sha256.New()
		io.Copy(h, f)
		return h.Sum(nil)
	}
	s.mustSmbclient(t, local, "put big.bin", dialects[0].opts...)
	if got := sum(filepath.Join(s.dir, "big.bin")); !bytes.Equal(got, want) {
		t.Fatalf("the 1 GiB file on disk is not what was sent")
	}
	os.Remove(filepath.Join(local, "big.bin"))
	s.mustSmbclient(t, local, "get big.bin back.bin", dialects[0].opts...)
	if got := sum(filepath.Join(local, "back.bin")); !bytes.Equal(got, want) {
		t.Fatalf("the 1 GiB file came back different")
	}
}

// TestManySmallFiles puts 10,000 small files, lists them and gets them
// back.
func TestManySmallFiles(t *testing.T) {
	s := startServer(t)
	local := t.TempDir()
	up := filepath.Join(local, "many")
	os.Mkdir(up, 0755)
	const n = 10000
	for i := 0; i < n; i++ {
		os.WriteFile(filepath.Join(up, fmt.Sprintf("f%05d.txt", i)), []byte(fmt.Sprintf("file %d\n", i)), 0644)
	}
	s.mustSmbclient(t, local, "recurse on; prompt off; mput many", dialects[0].opts...)
	entries, err := os.ReadDir(filepath.Join(s.dir, "many"))
	if err != nil || len(entries) != n {
		t.Fatalf("the share's many/ holds %d entries (%v), not %d", len(entries), err, n)
	}
	out := s.mustSmbclient(t, local, "ls many\\*", dialects[0].opts...)
	if c := strings.Count(out, ".txt "); c != n {
		t.Fatalf("ls listed %d files, not %d", c, n)
	}
	down := filepath.Join(local, "down")
	os.Mkdir(down, 0755)
	s.mustSmbclient(t, down, "recurse on; prompt off; mget many", dialects[0].opts...)
	for _, i := range []int{0, 1, 4999, 9999} {
		name := fmt.Sprintf("f%05d.txt", i)
		got, _ := os.ReadFile(filepath.Join(down, "many", name))
		if string(got) != fmt.Sprintf("file %d\n", i) {
			t.Fatalf("%s came back as %q", name, got)
		}
	}
	got, _ := os.ReadDir(filepath.Join(down, "many"))
	if len(got) != n {
		t.Fatalf("mget brought back %d files, not %d", len(got), n)
	}
}

// TestNames puts and gets files with Unicode names, names of 255 bytes
// (the longest a Linux name can be) and names the share must refuse.
func TestNames(t *testing.T) {
	s := startServer(t)
	local := t.TempDir()
	long := strings.Repeat("é", 127) + "x" // 255 bytes of UTF-8
	names := []string{"héllo wörld ✓.txt", "日本語のファイル.txt", "emoji 😀🎉.txt", long, "space and 'quote'.txt"}
	for i, name := range names {
		os.WriteFile(filepath.Join(local, fmt.Sprintf("src%d", i)), []byte(name), 0644)
		s.mustSmbclient(t, local, fmt.Sprintf(`put src%d "%s"`, i, name), dialects[0].opts...)
		got, err := os.ReadFile(filepath.Join(s.dir, name))
		if err != nil || string(got) != name {
			t.Fatalf("%q on disk: %q, %v", name, got, err)
		}
		s.mustSmbclient(t, local, fmt.Sprintf(`get "%s" back%d`, name, i), dialects[0].opts...)
		if got, _ := os.ReadFile(filepath.Join(local, fmt.Sprintf("back%d", i))); string(got) != name {
			t.Fatalf("%q came back as %q", name, got)
		}
	}
	out := s.mustSmbclient(t, local, "ls", dialects[0].opts...)
	for _, name := range names {
		if !strings.Contains(out, name) {
			t.Errorf("ls does not show %q:\n%s", name, out)
		}
	}
	// Too long for the file system, and characters Windows forbids (a ':'
	// names a stream: see TestStreams).
	for _, bad := range []string{long + "y", "a<b", "what?", "col:on:$BAD"} {
		out, _ := s.smbclient(t, local, fmt.Sprintf(`put src0 "%s"`, bad), dialects[0].opts...)
		if !strings.Contains(out, "NT_STATUS_OBJECT_NAME_INVALID") {
			t.Errorf("put as %q: %s", bad, out)
		}
	}
	if entries, _ := os.ReadDir(s.dir); len(entries) != len(names) {
		t.Errorf("the share holds %d entries, not %d", len(entries), len(names))
	}
}

// TestAttributes sets DOS attributes with smbclient: read-only is the
// owner's write bit on disk, hidden and system are kept for the client.
func TestAttributes(t *testing.T) {
	s := startServer(t)
	local := t.TempDir()
	os.WriteFile(filepath.Join(local, "f.txt"), []byte("x"), 0644)
	// attrs is the attribute column smbclient's ls shows for f.txt.
	attrs := func() string {
		out := s.mustSmbclient(t, local, "ls f.txt", dialects[0].opts...)
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 2 && f[0] == "f.txt" {
				return f[1]
			}
		}
		t.Fatalf("ls does not show f.txt:\n%s", out)
		return ""
	}
	s.mustSmbclient(t, local, "put f.txt", dialects[0].opts...)
	if a := attrs(); a != "A" {
		t.Fatalf("a new file has the attributes %q, not A", a)
	}
	s.mustSmbclient(t, local, "setmode f.txt +rhs", dialects[0].opts...)
	if st, err := os.Stat(filepath.Join(s.dir, "f.txt")); err != nil || st.Mode().Perm()&0200 != 0 {
		t.Fatalf("read-only left the owner's write bit: %v %v", st.Mode(), err)
	}
	if a := attrs(); a != "AHSR" {
		t.Fatalf("after setmode +rhs the attributes are %q, not AHSR", a)
	}
	s.mustSmbclient(t, local, "setmode f.txt -rhs", dialects[0].opts...)
	if st, _ := os.Stat(filepath.Join(s.dir, "f.txt")); st.Mode().Perm()&0200 == 0 {
		t.Fatalf("clearing read-only left the file unwritable: %v", st.Mode())
	}
	if a := attrs(); a != "A" {
		t.Fatalf("after setmode -rhs the attributes are %q, not A", a)
	}
}
