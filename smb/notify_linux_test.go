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
	bin := need(t, "smbclient")
	stdbuf := need(t, "stdbuf") // smbclient's output, line by line
	os.Mkdir(filepath.Join(s.dir, "watched"), 0755)
	local := t.TempDir()
	os.WriteFile(filepath.Join(local, "f.txt"), []byte("x"), 0644)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, stdbuf, "-oL", bin, "-s", "/dev/null", "//127.0.0.1/"+testShare, "-p", s.port,
		"-U", testUser+"%"+testPass, "-c", "notify watched")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); cmd.Wait() }()
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- strings.TrimSpace(sc.Text())
		}
		close(lines)
	}()
	next := func() string {
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
