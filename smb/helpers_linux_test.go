//go:build linux

package smb_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"plug/smb"
	"plug/tunnel/clustertest"
)

// The one credential of the test servers.
const (
	testUser  = "tester"
	testPass  = "Secret-pass-1"
	testShare = "share"
)

// installHint is how to get the clients these tests run.
const installHint = "apt-get install -y --no-install-recommends smbclient samba samba-testsuite python3-impacket (testdata/smb/deps.sh)"

func TestMain(m *testing.M) {
	// The test binary doubles as a server running under another uid (see
	// startServerAs).
	if dir := os.Getenv("PLUG_SMB_TEST_SERVE"); dir != "" {
		serveChild(dir)
		return
	}
	os.Exit(m.Run())
}

// need returns the path of a client program. When it is missing the test
// fails with CI=true (CI must not pass by skipping) and is skipped
// otherwise.
func need(t testing.TB, prog string) string {
	t.Helper()
	p, err := exec.LookPath(prog)
	if err != nil {
		missing(t, fmt.Sprintf("%s is not installed", prog))
	}
	return p
}

// needImpacket returns a python3 that can import impacket: the one on
// PATH, or the system's, where Debian's python3-impacket lives.
func needImpacket(t testing.TB) string {
	t.Helper()
	var why []string
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		out, err := exec.Command(py, "-c", "import impacket.smbconnection").CombinedOutput()
		if err == nil {
			return py
		}
		why = append(why, fmt.Sprintf("%s: %v %s", py, err, lastLine(out)))
	}
	missing(t, "no python3 can import impacket ("+strings.Join(why, "; ")+")")
	return ""
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

func missing(t testing.TB, what string) {
	t.Helper()
	clustertest.Unavailable(t, what+"; install it with "+installHint)
}

// logBuffer collects a server's log lines.
type logBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (l *logBuffer) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logBuffer) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// server is a running SMB server for one test.
type server struct {
	addr string // 127.0.0.1:PORT
	port string
	dir  string // the directory it serves
	log  *logBuffer
}

// startServer serves a fresh directory in this process until the test ends.
func startServer(t testing.TB) *server {
	t.Helper()
	dir := t.TempDir()
	log := &logBuffer{}
	srv, err := smb.New(smb.Config{Share: testShare, Dir: dir, User: testUser, Password: testPass, Logf: log.logf})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return &server{addr: l.Addr().String(), port: port, dir: dir, log: log}
}

// startServerAs serves a fresh directory owned by uid:gid from a child
// process running as uid:gid.
func startServerAs(t testing.TB, uid, gid int) *server {
	t.Helper()
	// t.TempDir's parent is closed to other uids.
	base, err := os.MkdirTemp("", "plug-smb-owner-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0755)
	dir := filepath.Join(base, "share")
	if err := os.Mkdir(dir, 0755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	// The test binary may sit in a directory uid cannot enter.
	bin := filepath.Join(base, "smb.test")
	if err := copyFile(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	s, _ := startChild(t, bin, dir, &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}})
	return s
}

// startServerProcess serves a fresh directory from a child process (the
// test binary itself, see serveChild), whose memory the test can read;
// it returns the server and the child's process id.
func startServerProcess(t testing.TB) (*server, int) {
	t.Helper()
	return startChild(t, os.Args[0], t.TempDir(), nil)
}

// startChild runs the test binary bin as a server of dir with attr, until
// the test ends.
func startChild(t testing.TB, bin, dir string, attr *syscall.SysProcAttr) (*server, int) {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "PLUG_SMB_TEST_SERVE="+dir)
	cmd.SysProcAttr = attr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("the server process did not start: %v", err)
	}
	addr := strings.TrimSpace(line)
	_, port, _ := net.SplitHostPort(addr)
	return &server{addr: addr, port: port, dir: dir, log: &logBuffer{}}, cmd.Process.Pid
}

// serveChild is the server of startServerAs: it prints its address and
// serves until its stdin closes.
func serveChild(dir string) {
	srv, err := smb.New(smb.Config{Share: testShare, Dir: dir, User: testUser, Password: testPass})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(l.Addr())
	go func() {
		io.Copy(io.Discard, os.Stdin)
		srv.Close()
	}()
	srv.Serve(l)
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0755)
}

// smbclient runs smbclient's commands cmds against s in the local
// directory dir, with extra options, and returns its output.
func (s *server) smbclient(t testing.TB, dir string, cmds string, extra ...string) (string, error) {
	t.Helper()
	return s.smbclientAs(t, dir, testUser+"%"+testPass, cmds, extra...)
}

func (s *server) smbclientAs(t testing.TB, dir, cred, cmds string, extra ...string) (string, error) {
	t.Helper()
	bin := need(t, "smbclient")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	args := []string{"-s", "/dev/null", "//127.0.0.1/" + testShare, "-p", s.port, "-U", cred}
	args = append(append(args, extra...), "-c", cmds)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// mustSmbclient is smbclient that fails the test on an error.
func (s *server) mustSmbclient(t testing.TB, dir, cmds string, extra ...string) string {
	t.Helper()
	out, err := s.smbclient(t, dir, cmds, extra...)
	if err != nil || strings.Contains(out, "NT_STATUS_") {
		t.Fatalf("smbclient %v -c %q: %v\n%s", extra, cmds, err, out)
	}
	return out
}

// impacket runs a python3 script with impacket's SMBConnection logged in
// to s as conn (and the share's name as share) and returns its output.
func (s *server) impacket(t testing.TB, script string) (string, error) {
	t.Helper()
	py := needImpacket(t)
	prelude := fmt.Sprintf(`
import sys, io
from impacket.smbconnection import SMBConnection, SessionError
share = %q
conn = SMBConnection('127.0.0.1', '127.0.0.1', sess_port=%s)
conn.login(%q, %q)
`, testShare, s.port, testUser, testPass)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-c", prelude+script)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (s *server) mustImpacket(t testing.TB, script string) string {
	t.Helper()
	out, err := s.impacket(t, script)
	if err != nil {
		t.Fatalf("impacket: %v\n%s", err, out)
	}
	return out
}

// mustPassTorture runs smbtorture's subtests tests against s, within 3
// minutes, and fails the test for each that does not pass.
func (s *server) mustPassTorture(t testing.TB, tests ...string) {
	t.Helper()
	bin := need(t, "smbtorture")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := append([]string{"//127.0.0.1/" + testShare, "-p", s.port, "-U", testUser + "%" + testPass, "--fullname", "--format=subunit"}, tests...)
	out, _ := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	for _, name := range tests {
		if !strings.Contains(string(out), "\nsuccess: "+name+"\n") {
			t.Errorf("%s did not pass (ctx: %v):\n%s", name, ctx.Err(), out)
		}
	}
}
