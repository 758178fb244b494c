//go:build linux

package smb_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"plug/tunnel/clustertest"
)

// mount mounts s's share as a file system with smbnetfs (FUSE over
// libsmbclient, the SMB client of GNOME's and KDE's file managers) until
// the test ends, and returns the share's directory in the mount.
func (s *server) mount(t *testing.T) string {
	t.Helper()
	bin := need(t, "smbnetfs")
	fusermount := need(t, "fusermount")
	if _, err := os.Stat("/dev/fuse"); err != nil {
		missing(t, "there is no /dev/fuse")
	}
	// smbnetfs reads its configuration, and libsmbclient its smb.conf,
	// from $HOME/.smb. A stat workaround of smbnetfs's defaults answers
	// "no such file" for names such as .git and HEAD near the mount's top
	// without asking the server: depth 0 turns it off.
	home := t.TempDir()
	os.Mkdir(filepath.Join(home, ".smb"), 0700)
	conf := filepath.Join(home, ".smb", "smbnetfs.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf("auth %q %q\nsmb_query_browsers false\nstat_workaround_depth 0\n", testUser, testPass)), 0600)
	os.WriteFile(filepath.Join(home, ".smb", "smb.conf"), []byte("[global]\n"), 0600)
	mnt := t.TempDir()
	cmd := exec.Command(bin, mnt, "-f", "-o", "config="+conf)
	cmd.Env = append(os.Environ(), "HOME="+home)
	// A file, not a pipe: the connection processes smbnetfs forks would
	// hold a pipe open past its end.
	logName := filepath.Join(home, "smbnetfs.log")
	log, err := os.Create(logName)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		if out, err := exec.Command(fusermount, "-u", mnt).CombinedOutput(); err != nil {
			t.Errorf("fusermount -u: %v %s", err, out)
		}
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Errorf("smbnetfs did not end on SIGTERM")
			cmd.Process.Kill()
			<-exited
		}
	})
	// A host name with a port reaches a server on another port than 445.
	share := filepath.Join(mnt, "127.0.0.1:"+s.port, testShare)
	clustertest.Eventually(t, 30*time.Second, "the share mounted", func() error {
		select {
		case <-exited:
			b, _ := os.ReadFile(logName)
			t.Fatalf("smbnetfs ended: %s", b)
		default:
		}
		_, err := os.ReadDir(share)
		return err
	})
	return share
}

// run runs a command in dir and returns its output, failing the test on
// an error.
func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=Tester", "GIT_AUTHOR_EMAIL=tester@example.com",
		"GIT_COMMITTER_NAME=Tester", "GIT_COMMITTER_EMAIL=tester@example.com", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// TestMountedGit: on the share mounted as a file system, git clones a
// repository of 2,000 files into it, finds the working tree clean and
// commits, as on a local disk; the repository on the server's disk is
// the same.
func TestMountedGit(t *testing.T) {
	git := need(t, "git")
	s := startServer(t)
	share := s.mount(t)
	src := t.TempDir()
	run(t, src, git, "init", "-q", "-b", "main")
	for i := 0; i < 2000; i++ {
		dir := filepath.Join(src, fmt.Sprintf("d%02d", i%40))
		os.MkdirAll(dir, 0755)
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("file%04d.txt", i)), []byte(fmt.Sprintf("line %d\n", i)), 0644)
	}
	run(t, src, git, "add", "-A")
	run(t, src, git, "commit", "-q", "-m", "2,000 files")

	start := time.Now()
	run(t, share, git, "clone", "-q", src, "work")
	t.Logf("git clone of 2,000 files into the mount took %v", time.Since(start))
	work := filepath.Join(share, "work")
	start = time.Now()
	if out := run(t, work, git, "status", "--porcelain"); out != "" {
		t.Fatalf("git status after the clone is not clean:\n%s", out)
	}
	t.Logf("git status took %v", time.Since(start))
	if err := os.WriteFile(filepath.Join(work, "d07", "file0007.txt"), []byte("changed\n"), 0644); err != nil {
		t.Fatal(err)
	}
	if out := run(t, work, git, "status", "--porcelain"); out != " M d07/file0007.txt\n" {
		t.Fatalf("git status after a change: %q", out)
	}
	run(t, work, git, "commit", "-q", "-a", "-m", "a change")
	if out := run(t, work, git, "status", "--porcelain"); out != "" {
		t.Fatalf("git status after the commit is not clean:\n%s", out)
	}
	head := run(t, work, git, "log", "-1", "--format=%H %s")
	if !strings.HasSuffix(head, " a change\n") {
		t.Fatalf("the last commit is %q", head)
	}
	// The server's disk holds the same repository, whole.
	disk := filepath.Join(s.dir, "work")
	if got := run(t, disk, git, "log", "-1", "--format=%H %s"); got != head {
		t.Fatalf("on disk the last commit is %q, in the mount %q", got, head)
	}
	run(t, disk, git, "fsck", "--strict")
	if out := run(t, disk, git, "status", "--porcelain"); out != "" {
		t.Fatalf("on disk git status is not clean:\n%s", out)
	}
	if out := run(t, disk, git, "ls-files"); strings.Count(out, "\n") != 2000 {
		t.Fatalf("on disk git lists %d files", strings.Count(out, "\n"))
	}
}

// holder is a file another client (impacket) holds open.
type holder struct {
	in   io.WriteCloser
	out  *bufio.Reader
	cmd  *exec.Cmd
	last string
}

// hold opens name with impacket, with the share mode share (1 read, 2
// write, 4 delete), as a directory when dir, and holds it open until
// release.
func (s *server) hold(t *testing.T, name string, share int, dir bool) *holder {
	t.Helper()
	py := needImpacket(t)
	options, readBack := 0x40, "True" // a file, read back at the end
	if dir {
		options, readBack = 0x1, "False"
	}
	script := fmt.Sprintf(`
import sys
from impacket.smbconnection import SMBConnection
conn = SMBConnection('127.0.0.1', '127.0.0.1', sess_port=%s)
conn.login(%q, %q)
tid = conn.connectTree(%q)
smb = conn.getSMBServer()
fid = smb.create(tid, %q, 0x120089, %d, %d, 1, 0)
print('held', flush=True)
sys.stdin.readline()
if %s:
    print('read', repr(smb.read(tid, fid, 0, 1000).decode()), flush=True)
smb.close(tid, fid)
print('closed', flush=True)
`, s.port, testUser, testPass, testShare, name, share, options, readBack)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	cmd := exec.CommandContext(ctx, py, "-c", script)
	in, _ := cmd.StdinPipe()
	outPipe, _ := cmd.StdoutPipe()
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holder{in: in, out: bufio.NewReader(outPipe), cmd: cmd}
	t.Cleanup(func() { in.Close(); cancel(); cmd.Wait() })
	if l := h.line(); l != "held" {
		t.Fatalf("impacket did not open %s: %s", name, l)
	}
	return h
}

func (h *holder) line() string {
	l, err := h.out.ReadString('\n')
	if err != nil {
		rest, _ := io.ReadAll(h.out)
		return strings.TrimSpace(l + string(rest))
	}
	return strings.TrimSpace(l)
}

// release reads the file through the held handle (for a file) and closes
// it; it returns what was read, as a Python literal.
func (h *holder) release(t *testing.T) string {
	t.Helper()
	fmt.Fprintln(h.in)
	var read string
	for l := h.line(); l != "closed"; l = h.line() {
		if !strings.HasPrefix(l, "read ") {
			rest, _ := io.ReadAll(h.out)
			t.Fatalf("the held handle: %s\n%s", l, rest)
		}
		read = strings.TrimPrefix(l, "read ")
	}
	return read
}

// TestMountedAtomicSave: an editor's atomic save on the mount (write a
// temporary file, rename it over the file) while another client holds the
// file open, sharing delete, works as on a local disk: the name holds the
// new text and the other client's handle still reads the old. A holder
// that refuses deletion (no FILE_SHARE_DELETE) makes the save fail, as
// Windows does, and nothing is lost.
func TestMountedAtomicSave(t *testing.T) {
	s := startServer(t)
	share := s.mount(t)
	doc := filepath.Join(share, "doc.txt")
	save := func(text string) error {
		tmp := filepath.Join(share, ".doc.txt.swp")
		if err := os.WriteFile(tmp, []byte(text), 0644); err != nil {
			return err
		}
		return os.Rename(tmp, doc)
	}
	if err := os.WriteFile(doc, []byte("first\n"), 0644); err != nil {
		t.Fatal(err)
	}

	h := s.hold(t, "doc.txt", 7, false)
	if err := save("second\n"); err != nil {
		t.Fatalf("the save while another client has the file open: %v", err)
	}
	if b, err := os.ReadFile(doc); err != nil || string(b) != "second\n" {
		t.Fatalf("after the save the file reads %q, %v", b, err)
	}
	if got := h.release(t); got != `'first\n'` {
		t.Errorf("the other client's handle read %q, not the file it opened", got)
	}
	if b, _ := os.ReadFile(filepath.Join(s.dir, "doc.txt")); string(b) != "second\n" {
		t.Fatalf("once the other client closed, the file on disk reads %q", b)
	}
	if _, err := os.Stat(filepath.Join(s.dir, ".doc.txt.swp")); !os.IsNotExist(err) {
		t.Fatalf("the temporary file is still there: %v", err)
	}

	h = s.hold(t, "doc.txt", 3, false)
	if err := save("third\n"); !errors.Is(err, syscall.EEXIST) && !errors.Is(err, syscall.EACCES) && !errors.Is(err, syscall.EPERM) {
		t.Errorf("the save over a file held without FILE_SHARE_DELETE: %v", err)
	}
	if got := h.release(t); got != `'second\n'` {
		t.Errorf("the holder read %q", got)
	}
	for name, want := range map[string]string{"doc.txt": "second\n", ".doc.txt.swp": "third\n"} {
		if b, err := os.ReadFile(filepath.Join(s.dir, name)); string(b) != want {
			t.Errorf("%s on disk reads %q, %v; want %q", name, b, err, want)
		}
	}
}

// TestMountedRecreateWatchedDir: as npm does with node_modules, a
// directory on the mount that other clients watch (smbclient's notify)
// and hold open is deleted with all it holds and made again at once; the
// watcher is told the directory is deleted.
func TestMountedRecreateWatchedDir(t *testing.T) {
	s := startServer(t)
	share := s.mount(t)
	nm := filepath.Join(share, "node_modules")
	for _, p := range []string{"a/index.js", "a/lib/x.js", "b/package.json"} {
		os.MkdirAll(filepath.Dir(filepath.Join(nm, p)), 0755)
		if err := os.WriteFile(filepath.Join(nm, p), []byte(p), 0644); err != nil {
			t.Fatal(err)
		}
	}
	lines, _, exited := s.notify(t, "node_modules")
	i := 0
	clustertest.Eventually(t, 30*time.Second, "the watch in place", func() error {
		os.WriteFile(filepath.Join(nm, fmt.Sprintf("early%d", i)), nil, 0644)
		i++
		select {
		case <-lines:
			return nil
		case <-time.After(200 * time.Millisecond):
			return errors.New("none told yet")
		}
	})
	// A watcher slower to close than npm is to make the directory again.
	h := s.hold(t, "node_modules", 7, true)

	if err := os.RemoveAll(nm); err != nil {
		t.Fatalf("rm -rf node_modules: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(nm, "a"), 0755); err != nil {
		t.Fatalf("making node_modules again while it is watched: %v", err)
	}
	if err := os.WriteFile(filepath.Join(nm, "a", "index.js"), []byte("new"), 0644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(s.dir, "node_modules", "a", "index.js")); string(b) != "new" {
		t.Fatalf("on disk the new file reads %q, %v", b, err)
	}
	select {
	case <-exited:
		var told []string
		for l := range lines {
			told = append(told, l)
		}
		if !strings.Contains(strings.Join(told, "\n"), "NT_STATUS_DELETE_PENDING") {
			t.Errorf("the watcher ended without being told of the delete: %q", told)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the watcher was not told that its directory is deleted")
	}
	h.release(t)
	if entries, _ := os.ReadDir(filepath.Join(s.dir, "node_modules")); len(entries) != 1 || entries[0].Name() != "a" {
		t.Fatalf("once the holder closed, node_modules holds %v", entries)
	}
}
