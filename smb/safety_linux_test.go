//go:build linux

package smb_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPathEscapes tries to reach outside the share: "..", absolute names
// and symbolic links that point out, by smbclient and by impacket (which
// sends names as given). Nothing outside may be read, written or listed,
// while a link that stays inside works.
func TestPathEscapes(t *testing.T) {
	s := startServer(t)
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.txt")
	os.WriteFile(secret, []byte("outside the share"), 0644)
	os.WriteFile(filepath.Join(s.dir, "inside.txt"), []byte("inside"), 0644)
	os.Mkdir(filepath.Join(s.dir, "sub"), 0755)
	for link, target := range map[string]string{
		"outdir":   outside,
		"outfile":  secret,
		"relout":   "../" + filepath.Base(outside) + "/secret.txt",
		"etc":      "/etc",
		"sub/up":   "../../",
		"goodlink": "inside.txt",
	} {
		if err := os.Symlink(target, filepath.Join(s.dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	// The server's directory sits beside outside in the same parent for
	// "relout" to aim at it.
	if filepath.Dir(s.dir) != filepath.Dir(outside) {
		os.Symlink("../"+filepath.Base(outside)+"/secret.txt", filepath.Join(s.dir, "relout2"))
	}
	local := t.TempDir()
	os.WriteFile(filepath.Join(local, "evil.txt"), []byte("written from a client"), 0644)

	out := s.mustImpacket(t, `
def attempt(what, f):
    try:
        r = f()
        print('ALLOWED', what, r)
    except SessionError as e:
        print('refused', what, e.getErrorString()[0])
def get(name):
    buf = io.BytesIO(); conn.getFile(share, name, buf.write); return buf.getvalue()
def put(name):
    conn.putFile(share, name, io.BytesIO(b'written from a client').read)
for name in ['..\\secret.txt', '..\\..\\etc\\passwd', '\\..\\secret.txt', 'sub\\..\\..\\secret.txt',
             'outdir\\secret.txt', 'outfile', 'relout', 'relout2', 'etc\\passwd', 'sub\\up\\etc\\passwd',
             '/etc/passwd', 'C:\\Windows\\win.ini']:
    attempt('get ' + name, lambda: get(name))
for name in ['..\\evil.txt', 'outdir\\evil.txt', 'outfile', 'etc\\evil', 'sub\\up\\evil.txt']:
    attempt('put ' + name, lambda: put(name))
for name in ['outdir\\*', 'etc\\*', '..\\*', 'sub\\up\\*']:
    attempt('list ' + name, lambda: [f.get_longname() for f in conn.listPath(share, name)])
attempt('mkdir outdir\\newdir', lambda: conn.createDirectory(share, 'outdir\\newdir'))
attempt('rename into outdir', lambda: conn.rename(share, 'inside.txt', 'outdir\\moved.txt'))
attempt('rename to ..', lambda: conn.rename(share, 'inside.txt', '..\\moved.txt'))
attempt('delete outfile target', lambda: conn.deleteFile(share, 'outdir\\secret.txt'))
print('good', get('goodlink'))
print('dotdot', get('sub\\..\\inside.txt'), get('sub\\..\\sub\\..\\goodlink'))
names = sorted(f.get_longname() for f in conn.listPath(share, '*'))
print('root', names)
for f in conn.listPath(share, '*'):
    if f.get_longname() in ('outdir', 'outfile', 'etc'):
        print('out link', f.get_longname(), 'dir' if f.is_directory() else 'file', f.get_filesize())
`)
	if strings.Contains(out, "ALLOWED") || strings.Contains(out, "outside the share") {
		t.Fatalf("an escape worked:\n%s", out)
	}
	if !strings.Contains(out, "good b'inside'") {
		t.Fatalf("a link inside the share does not work:\n%s", out)
	}
	// A ".." that stays inside the share takes away the name before it.
	if !strings.Contains(out, "dotdot b'inside' b'inside'") {
		t.Fatalf("a path with a \"..\" inside the share does not work:\n%s", out)
	}
	// Links that lead out are listed as empty files (so that they can be
	// deleted), nothing of what they lead to.
	for _, name := range []string{"outdir", "outfile", "etc"} {
		if !strings.Contains(out, "out link "+name+" file 0\n") {
			t.Fatalf("the link %s out of the share is not listed as an empty file:\n%s", name, out)
		}
	}
	if n := strings.Count(out, "refused"); n != 25 {
		t.Fatalf("%d attempts refused, not 25:\n%s", n, out)
	}
	entries, _ := os.ReadDir(outside)
	if len(entries) != 1 {
		t.Fatalf("the directory outside the share now holds %v", entries)
	}
	if got, _ := os.ReadFile(secret); string(got) != "outside the share" {
		t.Fatalf("the file outside the share was changed: %q", got)
	}
	if got, _ := os.ReadFile(filepath.Join(s.dir, "inside.txt")); string(got) != "inside" {
		t.Fatalf("inside.txt was changed: %q", got)
	}

	// smbclient normalises names itself; what it sends must be refused too.
	for _, cmd := range []string{"get outfile x", "get outdir\\secret.txt x", "put evil.txt outdir\\evil.txt", "put evil.txt etc\\evil"} {
		got, _ := s.smbclient(t, local, cmd, dialects[0].opts...)
		if !strings.Contains(got, "NT_STATUS_") {
			t.Errorf("smbclient %q was not refused:\n%s", cmd, got)
		}
	}
	if _, err := os.Stat(filepath.Join(local, "x")); err == nil {
		t.Errorf("smbclient got a file from outside the share")
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Fatalf("the directory outside the share now holds %v", entries)
	}
}

// TestRefused checks that a wrong password, a guest, an anonymous logon
// and an unsigned request on a signed session are all refused, and that
// the refusals are logged with the user name escaped.
func TestRefused(t *testing.T) {
	s := startServer(t)
	local := t.TempDir()
	for _, c := range []struct{ what, cred string }{
		{"wrong password", testUser + "%wrong"},
		{"another user", "someone%" + testPass},
		{"guest", "guest%"},
		{"a user name with control characters", "bad\x1b[31m%x"},
	} {
		out, err := s.smbclientAs(t, local, c.cred, "ls")
		if err == nil || !strings.Contains(out, "NT_STATUS_LOGON_FAILURE") {
			t.Errorf("%s: not refused: %v\n%s", c.what, err, out)
		}
	}
	out, err := s.smbclient(t, local, "ls", "-N")
	if err == nil || !strings.Contains(out, "NT_STATUS_LOGON_FAILURE") {
		t.Errorf("anonymous: not refused: %v\n%s", err, out)
	}
	log := s.log.text()
	if strings.Contains(log, "\x1b") || !strings.Contains(log, `"bad\x1b[31m"`) {
		t.Errorf("a peer's user name reached the log unescaped:\n%q", log)
	}
	if strings.Contains(log, testPass) {
		t.Errorf("the password reached the log")
	}

	// impacket signs (or, on 3.0, encrypts) once the session is set up;
	// switched off, its next request goes plain and must be refused.
	got := s.mustImpacket(t, `
from impacket.smb3structs import SMB2_DIALECT_21
c21 = SMBConnection('127.0.0.1', '127.0.0.1', sess_port=conn._sess_port, preferredDialect=SMB2_DIALECT_21)
c21.login(conn._SMBConnection._Session['UserCredentials'][0], conn._SMBConnection._Session['UserCredentials'][1])
for name, c in [('2.1', c21), ('3.0', conn)]:
    print(name, 'signed', c.listPath(share, '*')[0].get_longname())
    c._SMBConnection._Session['SigningActivated'] = False
    c._SMBConnection._Session['SessionFlags'] &= ~4  # impacket encrypts all on 3.x
    for tree in c._SMBConnection._Session['TreeConnectTable'].values():
        tree['EncryptData'] = False
    try:
        c.listPath(share, '*')
        print(name, 'UNSIGNED ALLOWED')
    except SessionError as e:
        print(name, 'unsigned refused', e.getErrorString()[0])
`)
	for _, d := range []string{"2.1", "3.0"} {
		if !strings.Contains(got, d+" signed .") || !strings.Contains(got, d+" unsigned refused STATUS_ACCESS_DENIED") {
			t.Fatalf("an unsigned request on a signed %s session:\n%s", d, got)
		}
	}
}

// smb2Message is a minimal SMB2 request: command, message id, body.
func smb2Message(cmd uint16, mid uint64, body []byte) []byte {
	h := make([]byte, 64)
	copy(h, "\xfeSMB")
	binary.LittleEndian.PutUint16(h[4:], 64)
	binary.LittleEndian.PutUint16(h[12:], cmd)
	binary.LittleEndian.PutUint16(h[14:], 1)
	binary.LittleEndian.PutUint64(h[24:], mid)
	return frame(append(h, body...))
}

func frame(msg []byte) []byte {
	return append([]byte{0, byte(len(msg) >> 16), byte(len(msg) >> 8), byte(len(msg))}, msg...)
}

// readFrame reads one response, or fails with the connection closed.
func readFrame(c net.Conn) ([]byte, error) {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var h [4]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return nil, err
	}
	b := make([]byte, int(h[1])<<16|int(h[2])<<8|int(h[3]))
	_, err := io.ReadFull(c, b)
	return b, err
}

// TestHostileInput sends malformed and oversized requests: each closes
// its own connection, and a connection opened before them goes on
// working.
func TestHostileInput(t *testing.T) {
	s := startServer(t)
	negotiate := make([]byte, 38)
	binary.LittleEndian.PutUint16(negotiate, 36)
	binary.LittleEndian.PutUint16(negotiate[2:], 1)
	binary.LittleEndian.PutUint16(negotiate[36:], 0x0202)
	echo := []byte{4, 0, 0, 0}

	healthy, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer healthy.Close()
	healthy.Write(smb2Message(0, 0, negotiate))
	if resp, err := readFrame(healthy); err != nil || len(resp) < 64 || binary.LittleEndian.Uint32(resp[8:]) != 0 {
		t.Fatalf("NEGOTIATE: %v %x", err, resp)
	}

	huge := []byte{0, 0xFF, 0xFF, 0xFF}
	truncatedHeader := frame([]byte("\xfeSMB\x40\x00"))
	badProtocol := frame(bytes.Repeat([]byte{0xAB}, 100))
	badType := []byte{0x85, 0, 0, 0}
	shortNegotiate := smb2Message(0, 0, []byte{36, 0})
	hugeContexts := smb2Message(0, 0, func() []byte {
		b := append([]byte(nil), negotiate...)
		binary.LittleEndian.PutUint16(b[36:], 0x0311)
		binary.LittleEndian.PutUint32(b[28:], 0xFFFFFFF0) // context offset far out
		binary.LittleEndian.PutUint16(b[32:], 0xFFFF)
		return b
	}())
	badChain := func() []byte {
		m := smb2Message(0, 0, negotiate)
		binary.LittleEndian.PutUint32(m[4+20:], 0xFFFFFF00) // next command past the end
		return m
	}()
	outsideWindow := append(smb2Message(0, 0, negotiate), smb2Message(13, 999999, echo)...)
	garbageAfterNegotiate := append(smb2Message(0, 0, negotiate), frame(bytes.Repeat([]byte{0xFE}, 64))...)
	for name, msg := range map[string][]byte{
		"a frame over the size limit":      huge,
		"a truncated header":               truncatedHeader,
		"not SMB":                          badProtocol,
		"not a session message":            badType,
		"a short NEGOTIATE":                shortNegotiate,
		"negotiate contexts out of bounds": hugeContexts,
		"a chain pointing past its end":    badChain,
		"a message id outside the window":  outsideWindow,
		"garbage after NEGOTIATE":          garbageAfterNegotiate,
		"a request before NEGOTIATE":       smb2Message(13, 0, echo),
	} {
		c, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(msg)
		closed := false
		for i := 0; i < 4; i++ {
			resp, err := readFrame(c)
			if err != nil {
				closed = err == io.EOF || strings.Contains(err.Error(), "reset")
				if !closed {
					t.Errorf("%s: %v", name, err)
				}
				break
			}
			// An error answer is as good as a close, as long as the
			// connection does not go on as if nothing happened.
			if len(resp) >= 64 && binary.LittleEndian.Uint32(resp[8:]) != 0 {
				closed = true
				break
			}
		}
		c.Close()
		if !closed {
			t.Errorf("%s: the connection was neither refused nor closed", name)
		}
	}

	// The healthy connection was not disturbed.
	healthy.Write(smb2Message(13, 1, echo))
	resp, err := readFrame(healthy)
	if err != nil || len(resp) < 64 || binary.LittleEndian.Uint16(resp[12:]) != 13 || binary.LittleEndian.Uint32(resp[8:]) != 0 {
		t.Fatalf("ECHO on the healthy connection: %v %x", err, resp)
	}
	// And new clients are served.
	s.mustSmbclient(t, t.TempDir(), "ls")
}
