package lifeline

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"plug/tunnel/clustertest"
)

// With LIFELINE_TEST_PLUG=1 the test binary stands for plug: it ties the
// command of its arguments and waits for it, exiting with its exit code.
// With LIFELINE_TEST_TERM=FIFO it sends the command SIGTERM, as plug
// forwards one, once the command has written to FIFO. As plug's main.go does, the test binary
// runs the guardian when it is started as one.
func init() {
	if len(os.Args) > 1 && os.Args[1] == HelperArg {
		os.Exit(Guard(os.Args[2:]))
	}
	if os.Getenv("LIFELINE_TEST_PLUG") == "1" {
		os.Exit(fakePlug(os.Args[1:]))
	}
}

func fakePlug(argv []string) int {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	t, err := Tie(cmd)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 90
	}
	err = cmd.Start()
	t.Started()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 91
	}
	if ready := os.Getenv("LIFELINE_TEST_TERM"); ready != "" {
		go func() {
			// Reading a FIFO blocks until the command has opened it to
			// write, and has written and closed it.
			if _, err := os.ReadFile(ready); err == nil {
				cmd.Process.Signal(syscall.SIGTERM)
			}
		}()
	}
	cmd.Wait()
	return cmd.ProcessState.ExitCode()
}

// startPlug starts the stand-in for plug with the shell script script.
func startPlug(t *testing.T, script string, env ...string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	plug := exec.Command(self, "sh", "-c", script)
	plug.Env = append(append(os.Environ(), "LIFELINE_TEST_PLUG=1"), env...)
	plug.Stderr = os.Stderr
	if err := plug.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plug.Process.Kill(); plug.Wait() })
	return plug
}

// pidIn waits for a file holding a process id and returns it.
func pidIn(t *testing.T, path string) int {
	t.Helper()
	var pid int
	clustertest.Until(t, clustertest.Settle, path+" to hold a process id", func() bool {
		b, err := os.ReadFile(path)
		n, perr := strconv.Atoi(strings.TrimSpace(string(b)))
		pid = n
		return err == nil && perr == nil && strings.HasSuffix(string(b), "\n")
	})
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	return pid
}

// running reports whether pid is a process that has not exited.
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	end := strings.LastIndexByte(string(b), ')')
	return end < 0 || !strings.HasPrefix(strings.TrimSpace(string(b[end+1:])), "Z")
}

// allGone waits until none of pids runs, failing the test if some still
// do within limit; it returns how long that took. The callers' limit is
// README's promise for the lifeline, plug's own part: CMD and what it
// started end "within a second" of plug's end.
func allGone(t *testing.T, limit time.Duration, pids map[string]int) time.Duration {
	t.Helper()
	start := time.Now()
	clustertest.Eventually(t, limit, "the lifeline to end all of them", func() error {
		var left []string
		for what, pid := range pids {
			if running(pid) {
				left = append(left, fmt.Sprintf("%s (pid %d)", what, pid))
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("still running: %s", strings.Join(left, ", "))
		}
		return nil
	})
	return time.Since(start)
}

// The command, a child it started, and a grandchild orphaned by its
// parent's exit (which a plain parent-death signal would not reach) all
// end within a second of plug's kill -9.
func TestKill9OfPlugEndsTheCommandAndWhatItStarted(t *testing.T) {
	dir := t.TempDir()
	plug := startPlug(t, fmt.Sprintf(`
		sleep 300 & echo $! > %[1]s/child
		(setsid sleep 300 & echo $! > %[1]s/orphan)
		echo $$ > %[1]s/cmd
		exec sleep 300`, dir))
	pids := map[string]int{
		"the command":            pidIn(t, filepath.Join(dir, "cmd")),
		"its child":              pidIn(t, filepath.Join(dir, "child")),
		"an orphaned grandchild": pidIn(t, filepath.Join(dir, "orphan")),
	}
	for what, pid := range pids {
		if !running(pid) {
			t.Fatalf("%s (pid %d) does not run before plug is killed", what, pid)
		}
	}
	if err := plug.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	took := allGone(t, time.Second, pids)
	t.Logf("all gone %v after kill -9 of plug", took.Round(time.Millisecond))
}

// plug sees the command's own exit: its code, or 128+N for signal N; what
// the command left running ends with it.
func TestExitAsTheCommand(t *testing.T) {
	for _, tc := range []struct {
		script string
		want   int
	}{
		{"exit 7", 7},
		{"kill -TERM $$", 128 + 15},
		{"exit 0", 0},
	} {
		t.Run(tc.script, func(t *testing.T) {
			dir := t.TempDir()
			plug := startPlug(t, fmt.Sprintf("sleep 300 & echo $! > '%s/left'; %s", dir, tc.script))
			left := pidIn(t, filepath.Join(dir, "left"))
			plug.Wait()
			if got := plug.ProcessState.ExitCode(); got != tc.want {
				t.Errorf("plug saw exit code %d, want %d", got, tc.want)
			}
			allGone(t, time.Second, map[string]int{"what the command left running": left})
		})
	}
}

// A signal plug forwards reaches the command through the guardian.
func TestSignalsReachTheCommand(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	if err := syscall.Mkfifo(ready, 0o600); err != nil {
		t.Fatal(err)
	}
	plug := startPlug(t, fmt.Sprintf(`trap 'exit 3' TERM; echo ready > %s; while :; do sleep 0.05; done`, ready), "LIFELINE_TEST_TERM="+ready)
	done := make(chan struct{})
	go func() { plug.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(clustertest.Settle):
		t.Fatal("the command did not end within 10 s of the forwarded SIGTERM")
	}
	if got := plug.ProcessState.ExitCode(); got != 3 {
		t.Errorf("plug saw exit code %d, want 3 (the command's trap of SIGTERM)", got)
	}
}

// Killing the guardian itself with SIGKILL still ends the command (its
// parent-death signal).
func TestKill9OfTheGuardianEndsTheCommand(t *testing.T) {
	dir := t.TempDir()
	startPlug(t, fmt.Sprintf("echo $$ > '%s/cmd'; exec sleep 300", dir))
	cmd := pidIn(t, filepath.Join(dir, "cmd"))
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	guardian, _ := strconv.Atoi(fields[1])
	if err := syscall.Kill(guardian, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	allGone(t, time.Second, map[string]int{"the command": cmd})
}
