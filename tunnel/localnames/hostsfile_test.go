package localnames

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The environment of a re-executed test binary that is a run changing a
// hosts file (hostsWorker).
const (
	workerFile  = "PLUG_TEST_HOSTS_WORKER"
	workerHold  = "PLUG_TEST_HOSTS_HOLD" // set: publish once, then wait to be killed
	workerEdits = 200
)

func TestMain(m *testing.M) {
	if path := os.Getenv(workerFile); path != "" {
		os.Exit(hostsWorker(path))
	}
	os.Exit(m.Run())
}

// hostsWorker is one run: it adds, changes and removes its block in the
// hosts file at path workerEdits times, saying each edit on stdout, then
// removes its block.
func hostsWorker(path string) int {
	r, err := NewHostsFileResolver(path, path+".backup-"+strconv.Itoa(os.Getpid()), os.Getpid(), func(string) {})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if os.Getenv(workerHold) != "" {
		if _, err := r.Update([]HostLine{{netip.MustParseAddr("127.64.0.1"), []string{"web"}}}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println(1)
		io.Copy(io.Discard, os.Stdin) // until killed
		return 1
	}
	rnd := rand.New(rand.NewPCG(uint64(os.Getpid()), 1))
	names := []string{"web", "web.shop", "db", "api", "cache", "queue.infra"}
	for i := range workerEdits {
		var lines []HostLine
		for range rnd.IntN(4) { // none removes the block
			addr := netip.AddrFrom4([4]byte{127, byte(64 + rnd.IntN(64)), byte(rnd.IntN(256)), byte(1 + rnd.IntN(254))})
			lines = append(lines, HostLine{addr, names[rnd.IntN(len(names)):]})
		}
		if _, err := r.Update(lines); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println(i + 1)
	}
	if err := r.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// userHostsFile is a hosts file of n lines of a user's own, some of them
// of plug's addresses, with line end eol and a final one or not.
func userHostsFile(n int, eol string, final bool) []byte {
	var b bytes.Buffer
	for i := range n {
		switch i % 10 {
		case 0:
			fmt.Fprintf(&b, "# the user's comment %d", i)
		case 1:
			b.WriteString("127.0.0.1\tlocalhost")
		case 2:
			fmt.Fprintf(&b, "127.64.%d.%d\tmine-%d", i%250, 1+i%250, i) // plug's range, but not a block of plug's
		case 3:
		case 4:
			fmt.Fprintf(&b, "  10.1.%d.%d   intranet-%d.example   # a comment after", i%250, i%250, i)
		default:
			fmt.Fprintf(&b, "10.%d.%d.%d host-%d.example host-%d", i%250, (i/7)%250, 1+i%250, i, i)
		}
		if i < n-1 || final {
			b.WriteString(eol)
		}
	}
	return b.Bytes()
}

// TestHostsFileManyRuns: 16 runs (processes) at once add, change and
// remove their blocks in one hosts file, 200 times each, a quarter of them
// killed with SIGKILL midway: the user's lines come through byte for byte
// (LF and CRLF, with a final line end and without), and only blocks of the
// killed runs are left (the runs still going remove them). Then one more
// run is killed while its block is in the file, and the next run removes
// it.
func TestHostsFileManyRuns(t *testing.T) {
	const runs, killed = 16, 4
	for _, v := range []struct {
		name  string
		eol   string
		final bool
	}{{"LF", "\n", true}, {"CRLF", "\r\n", true}, {"LF, no final line end", "\n", false}, {"CRLF, no final line end", "\r\n", false}} {
		t.Run(v.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "hosts")
			user := userHostsFile(5000, v.eol, v.final)
			if err := os.WriteFile(path, user, 0o644); err != nil {
				t.Fatal(err)
			}
			rnd := rand.New(rand.NewPCG(uint64(len(v.name)), 2))
			var wg sync.WaitGroup
			var mu sync.Mutex
			var failures []string
			dead := map[int]bool{}
			for i := range runs {
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), workerFile+"="+path)
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				out, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				killAt := 0 // the edit after which the run is killed
				if i < killed {
					killAt = 1 + rnd.IntN(workerEdits-1)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					lines := bufio.NewScanner(out)
					for lines.Scan() {
						if n, _ := strconv.Atoi(lines.Text()); n == killAt {
							cmd.Process.Kill()
						}
					}
					err := cmd.Wait()
					mu.Lock()
					defer mu.Unlock()
					if killAt > 0 {
						dead[cmd.Process.Pid] = true
					} else if err != nil {
						failures = append(failures, fmt.Sprintf("run %d: %v: %s", cmd.Process.Pid, err, stderr.Bytes()))
					}
				}()
			}
			wg.Wait()
			if len(failures) > 0 {
				t.Fatalf("runs failed:\n%s", strings.Join(failures, "\n"))
			}
			h := parseHosts(readFile(t, path))
			if !bytes.Equal(h.user, user) {
				t.Fatalf("the user's lines changed:\n%s", firstDifference(user, h.user))
			}
			for _, b := range h.blocks {
				if !dead[b.pid] {
					t.Errorf("the block of run %d is left, which ended cleanly", b.pid)
				}
			}
			t.Logf("%d runs killed, %d left a block", killed, len(h.blocks))
			hold := exec.Command(os.Args[0], "-test.run=^$")
			hold.Env = append(os.Environ(), workerFile+"="+path, workerHold+"=1")
			stdin, _ := hold.StdinPipe()
			defer stdin.Close()
			published, _ := hold.StdoutPipe()
			if err := hold.Start(); err != nil {
				t.Fatal(err)
			}
			if line, _ := bufio.NewReader(published).ReadString('\n'); line != "1\n" {
				t.Fatalf("the run that holds a block said %q", line)
			}
			hold.Process.Kill()
			hold.Wait()
			if h := parseHosts(readFile(t, path)); !bytes.Equal(h.user, user) || len(h.blocks) == 0 || h.blocks[len(h.blocks)-1].pid != hold.Process.Pid {
				t.Fatalf("the killed run's block is not last in the file, or the user's lines changed: %d blocks", len(h.blocks))
			}
			var told []string
			next, err := NewHostsFileResolver(path, filepath.Join(t.TempDir(), BackupName), os.Getpid(), func(s string) { told = append(told, s) })
			if err != nil {
				t.Fatal(err)
			}
			if err := next.Close(); err != nil {
				t.Fatal(err)
			}
			if after := readFile(t, path); !bytes.Equal(after, user) {
				t.Fatalf("after the next run, the file is not the user's:\n%s", firstDifference(user, after))
			}
			if len(told) != 1 || !strings.Contains(told[0], "ended without cleaning up") || !strings.Contains(told[0], strconv.Itoa(hold.Process.Pid)) {
				t.Errorf("the next run removed the blocks of killed runs and told %q", told)
			}
		})
	}
}

// firstDifference shows where got first differs from want.
func firstDifference(want, got []byte) string {
	i := commonPrefix(want, got)
	from := max(0, i-80)
	return fmt.Sprintf("%d bytes, want %d; from byte %d:\n got %q\nwant %q", len(got), len(want), from, got[from:min(len(got), i+80)], want[from:min(len(want), i+80)])
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHostsFileBackup: before a run's first change, and before a change
// that moves lines of the user's (added below the blocks), the file's own
// lines are written to the backup; the moved lines come through.
func TestHostsFileBackup(t *testing.T) {
	dir := t.TempDir()
	path, backup := filepath.Join(dir, "hosts"), filepath.Join(dir, ".plug", BackupName)
	user := "127.0.0.1 localhost\r\n10.1.2.3 intranet.example"
	if err := os.WriteFile(path, []byte(user), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := NewHostsFileResolver(path, backup, os.Getpid(), func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(backup); !os.IsNotExist(err) {
		t.Fatalf("a backup was written before any change: %v", err)
	}
	if _, err := r.Update(hostLines("127.64.0.1", "web")); err != nil {
		t.Fatal(err)
	}
	if got := string(readFile(t, backup)); got != user {
		t.Fatalf("backup %q, want %q", got, user)
	}
	added := "10.9.9.9 added-below\r\n"
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(added)
	f.Close()
	if _, err := r.Update(hostLines("127.64.0.2", "web")); err != nil {
		t.Fatal(err)
	}
	want := user + "\r\n" + added
	if got := string(readFile(t, backup)); got != want {
		t.Fatalf("after lines were added below the block, backup %q, want %q", got, want)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if got := string(readFile(t, path)); got != want {
		t.Fatalf("after the run, the file is %q, want %q", got, want)
	}
}
