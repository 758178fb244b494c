//go:build linux

package smb_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"plug/tunnel/clustertest"
)

// TestChangeNotify watches a directory with smbclient's notify (a
// CHANGE_NOTIFY that pends until something changes, then again) while
// another client adds, renames and removes a file in it.
func TestChangeNotify(t *testing.T) {
	s := startServer(t)
	os.Mkdir(filepath.Join(s.dir, "watched"), 0755)
	local := t.TempDir()
	os.WriteFile(filepath.Join(local, "f.txt"), []byte("x"), 0644)
	lines, next, _ := s.notify(t, "watched")

	// Until the watch is in place, changes go unseen: add files until one
	// is told of.
	var first string
	i := 0
	// (Each try starts an smbclient: on a busy machine they are slow.)
	clustertest.Eventually(t, 30*time.Second, "a change told once the watch is in place", func() error {
		s.mustSmbclient(t, local, fmt.Sprintf(`put f.txt watched\early%d.txt`, i))
		i++
		select {
		case first = <-lines:
			return nil
		case <-time.After(200 * time.Millisecond):
			return errors.New("none told yet")
		}
	})
	// A put is a create and then a write: the watch may have come between
	// them, so the first told is an early file added or modified.
	if !strings.HasPrefix(first, "0001 early") && !strings.HasPrefix(first, "0003 early") {
		t.Fatalf("the first change told: %q", first)
	}
	// With the watch in place, every change is told: an add, a rename (old
	// name, then new) and a remove.
	s.mustSmbclient(t, local, `put f.txt watched\late.txt; rename watched\late.txt watched\renamed.txt; rm watched\renamed.txt`)
	want := []string{"0001 late.txt", "0004 late.txt", "0005 renamed.txt", "0002 renamed.txt"}
	for _, w := range want {
		for {
			l := next()
			if l == w {
				break
			}
			if !strings.HasPrefix(l, "0003 ") && !strings.HasPrefix(l, "0001 early") {
				t.Fatalf("notified %q while waiting for %q", l, w)
			}
		}
	}
}

// notify runs smbclient's notify on dir (a CHANGE_NOTIFY of its tree that
// pends until something changes, then again): the lines it prints, next
// (the next line, failing the test when none comes in 30 s) and its exit.
func (s *server) notify(t *testing.T, dir string) (<-chan string, func() string, <-chan error) {
	t.Helper()
	bin := need(t, "smbclient")
	stdbuf := need(t, "stdbuf") // smbclient's output, line by line
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	cmd := exec.CommandContext(ctx, stdbuf, "-oL", bin, "-s", "/dev/null", "//127.0.0.1/"+testShare, "-p", s.port,
		"-U", testUser+"%"+testPass, "-c", "notify "+dir)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	done := make(chan struct{})
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- strings.TrimSpace(sc.Text())
		}
		close(lines)
		exited <- cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() { cancel(); <-done })
	next := func() string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("smbclient's notify ended")
			}
			return l
		case <-time.After(30 * time.Second):
			t.Fatalf("no change was notified")
		}
		return ""
	}
	return lines, next, exited
}

// TestChangeNotifyFromDisk: files and directories the workload makes on
// disk, beside the server, are told to a watching client within 1 s,
// in the directories beneath too.
func TestChangeNotifyFromDisk(t *testing.T) {
	s := startServer(t)
	watched := filepath.Join(s.dir, "watched")
	os.Mkdir(watched, 0755)
	lines, next, _ := s.notify(t, "watched")
	i := 0
	clustertest.Eventually(t, 30*time.Second, "a file made on disk told once the watch is in place", func() error {
		os.WriteFile(filepath.Join(watched, fmt.Sprintf("early%d.txt", i)), nil, 0644)
		i++
		select {
		case <-lines:
			return nil
		case <-time.After(200 * time.Millisecond):
			return errors.New("none told yet")
		}
	})
	told := func(name, want string) {
		t.Helper()
		start := time.Now()
		for {
			l := next()
			if l == want {
				break
			}
			if !strings.HasPrefix(l, "0001 early") {
				t.Fatalf("told %q while waiting for %q", l, want)
			}
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s was told %v after it was made, not within 1 s", name, d)
		}
	}
	os.WriteFile(filepath.Join(watched, "pod.txt"), []byte("x"), 0644)
	told("pod.txt", "0001 pod.txt")
	os.Mkdir(filepath.Join(watched, "sub"), 0755)
	told("sub", "0001 sub")
	os.WriteFile(filepath.Join(watched, "sub", "deep.txt"), []byte("x"), 0644)
	told("sub/deep.txt", `0001 sub\deep.txt`)
	os.Rename(filepath.Join(watched, "pod.txt"), filepath.Join(watched, "moved.txt"))
	told("the rename", "0004 pod.txt")
	told("the rename", "0005 moved.txt")
	os.Remove(filepath.Join(watched, "moved.txt"))
	told("the remove", "0002 moved.txt")
}

// TestDeleteWatchedDir: deleting a directory another client watches tells
// the watcher (STATUS_DELETE_PENDING), the directory goes from disk, and
// the name can be made again (npm's delete and recreate).
func TestDeleteWatchedDir(t *testing.T) {
	s := startServer(t)
	os.Mkdir(filepath.Join(s.dir, "watched"), 0755)
	local := t.TempDir()
	lines, _, exited := s.notify(t, "watched")
	// The watch is in place once a change in it is told.
	i := 0
	os.WriteFile(filepath.Join(local, "f.txt"), nil, 0644)
	clustertest.Eventually(t, 30*time.Second, "the watch in place", func() error {
		s.mustSmbclient(t, local, fmt.Sprintf(`put f.txt watched\early%d.txt`, i))
		i++
		select {
		case <-lines:
			return nil
		case <-time.After(200 * time.Millisecond):
			return errors.New("none told yet")
		}
	})
	s.mustSmbclient(t, local, `deltree watched`)
	var told []string
	select {
	case err := <-exited:
		for l := range lines {
			told = append(told, l)
		}
		if !strings.Contains(strings.Join(told, "\n"), "NT_STATUS_DELETE_PENDING") {
			t.Errorf("the watcher ended (%v) without being told of the delete: %q", err, told)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the watcher was not told that its directory is deleted")
	}
	clustertest.Eventually(t, 30*time.Second, "the directory gone", func() error {
		if _, err := os.Stat(filepath.Join(s.dir, "watched")); err == nil {
			return errors.New("still on disk")
		}
		return nil
	})
	s.mustSmbclient(t, local, `mkdir watched`)
}

// TestNotifyTorture runs smbtorture's notify subtests that a server
// without delete-pending semantics for watched directories, or without
// the attribute change Windows tells for a renamed file, hangs in; and
// those that check that a watch seeing names is not told that attribute
// change too (rec), that the first request's buffer size holds for the
// watch (valid-req), that a path with ".." inside the share can be
// watched (tree), and that a first request is told of a change another
// connection asks for right after it (basedir: it hung whenever the
// server made the change first).
func TestNotifyTorture(t *testing.T) {
	startServer(t).mustPassTorture(t, "smb2.notify.mask-change", "smb2.notify.rmdir1", "smb2.notify.rmdir2", "smb2.notify.rmdir3", "smb2.notify.rmdir4",
		"smb2.notify.rec", "smb2.notify.valid-req", "smb2.notify.tree", "smb2.notify.basedir")
}
