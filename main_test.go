// The end-to-end tests drive plug with Unix signals.

//go:build unix

package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/keys"
	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// plugBin is the plug binary these tests run, built by TestMain.
var plugBin string

// The test binary doubles as CMD: with PLUG_TEST_HELPER=serve it is a tiny
// local server (see helperServe).
func TestMain(m *testing.M) {
	if os.Getenv("PLUG_TEST_HELPER") == "serve" {
		helperServe()
		return
	}
	dir, err := os.MkdirTemp("", "plug-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	plugBin = filepath.Join(dir, "plug")
	if out, err := exec.Command("go", "build", "-o", plugBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// helperServe listens on 127.0.0.1:$PLUG_TEST_PORT and greets every caller
// with "hello from the laptop". On SIGINT it exits with $PLUG_TEST_EXIT,
// unless PLUG_TEST_IGNORE_INT is set.
func helperServe() {
	ints := make(chan os.Signal, 2)
	signal.Notify(ints, os.Interrupt)
	l, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("PLUG_TEST_PORT"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(99)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, "hello from the laptop")
			c.Close()
		}
	}()
	for range ints {
		if os.Getenv("PLUG_TEST_IGNORE_INT") != "" {
			fmt.Fprintln(os.Stderr, "helper: ignoring SIGINT")
		} else {
			code, _ := strconv.Atoi(os.Getenv("PLUG_TEST_EXIT"))
			os.Exit(code)
		}
	}
}

// world is an agent with the in-memory platform behind a cuttable proxy,
// and a ~/.plug whose profile "test" reaches it.
type world struct {
	platform *tunneltest.Platform
	proxy    *tunneltest.Proxy
	agent    *tunnel.Agent
	home     string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{platform: tunneltest.NewPlatform(), home: t.TempDir()}
	addr, hostKey, _ := tunneltest.StartAgent(t, w.platform, func(a *tunnel.Agent) { w.agent = a })
	w.proxy = tunneltest.NewProxy(t, addr)
	_, port, _ := net.SplitHostPort(w.proxy.Addr())
	w.plugOK(t, "profile", "add", "test", "--host", "127.0.0.1", "--port", port, "--host-key", keys.AuthorizedKey(hostKey))
	w.plugOK(t, "keygen", "-p", "test")
	return w
}

func (w *world) env(extra ...string) []string {
	return append(append(os.Environ(), "PLUG_HOME="+w.home), extra...)
}

// plugOK runs a plug command that must succeed.
func (w *world) plugOK(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(plugBin, args...)
	cmd.Env = w.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("plug %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// running is a plug run in progress.
type running struct {
	cmd    *exec.Cmd
	stderr *tunneltest.Buffer
	exited chan struct{}
	code   int
}

// start starts `plug ARGS...` with the helper's environment.
func (w *world) start(t *testing.T, env []string, args ...string) *running {
	t.Helper()
	r := &running{cmd: exec.Command(plugBin, args...), stderr: &tunneltest.Buffer{}, exited: make(chan struct{})}
	r.cmd.Env = w.env(env...)
	r.cmd.Stderr = r.stderr
	// Its own process group, so that cleanup can kill CMD with it.
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r.cmd.Wait()
		r.code = r.cmd.ProcessState.ExitCode()
		close(r.exited)
	}()
	t.Cleanup(func() {
		syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
		<-r.exited
		t.Logf("plug's stderr:\n%s", r.stderr)
	})
	return r
}

// wait waits for plug to exit and returns its exit code.
func (r *running) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-r.exited:
		return r.code
	case <-time.After(clustertest.Settle):
		t.Fatalf("plug did not exit; stderr:\n%s", r.stderr)
		return 0
	}
}

// helperEnv makes the test binary a local server on port.
func helperEnv(port int, exitCode int) []string {
	return []string{"PLUG_TEST_HELPER=serve", "PLUG_TEST_PORT=" + strconv.Itoa(port), "PLUG_TEST_EXIT=" + strconv.Itoa(exitCode)}
}

// greeting dials address as a pod of the cluster would and returns the
// first line it reads.
func (w *world) greeting(address string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := w.platform.DialContext(ctx, "tcp", address)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestRunServesReconnectsAndGivesBack is a developer's run from start to
// end: a pod reaches the local process by its name, the network drops and
// comes back without a second takeover, and Ctrl-C gives the name back at
// once and exits with CMD's code.
func TestRunServesReconnectsAndGivesBack(t *testing.T) {
	w := newWorld(t)
	local := freePort(t)
	r := w.start(t, helperEnv(local, 7), "-p", "test", "-s", fmt.Sprintf("web:80:%d", local), "--", os.Args[0])

	reached := func() bool { line, err := w.greeting("web:80"); return err == nil && line == "hello from the laptop" }
	clustertest.Until(t, clustertest.Settle, "a pod to reach the local process as web:80", reached)
	if want := fmt.Sprintf("plug: web:80 → localhost:%d (web is new in the cluster)", local); !strings.Contains(r.stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
	}

	w.proxy.Cut()
	clustertest.Until(t, clustertest.Settle, "plug to reconnect", func() bool { return strings.Contains(r.stderr.String(), "reconnected") })
	clustertest.Until(t, clustertest.Settle, "web:80 to reach the local process again", reached)
	if n := w.platform.Count("serve", "web"); n != 1 {
		t.Errorf("the platform served web %d times; the run should have kept it across the reconnect", n)
	}
	if n := w.platform.Count("release", "web"); n != 0 {
		t.Errorf("web was released %d times during the run", n)
	}

	r.cmd.Process.Signal(os.Interrupt)
	if code := r.wait(t); code != 7 {
		t.Errorf("plug exited with %d, want CMD's 7", code)
	}
	// The agent keeps a dropped run's names for a minute: seeing them back
	// as plug exits means the goodbye gave them back.
	if n := w.platform.Count("release", "web"); n != 1 {
		t.Errorf("web was released %d times when plug exited, want once", n)
	}
	if _, held := w.platform.Held("web"); held {
		t.Error("web is still held after plug exited")
	}
}

func TestRunExitCodes(t *testing.T) {
	w := newWorld(t)
	for _, tc := range []struct {
		script string
		want   int
	}{
		{"exit 0", 0},
		{"exit 5", 5},
		{"kill -TERM $$", 128 + int(syscall.SIGTERM)},
	} {
		r := w.start(t, nil, "-p", "test", "-c", "--", "sh", "-c", tc.script)
		if code := r.wait(t); code != tc.want {
			t.Errorf("CMD %q: plug exited with %d, want %d", tc.script, code, tc.want)
		}
	}
	r := w.start(t, nil, "-p", "test", "-c", "--", "no-such-command-for-plug")
	if code := r.wait(t); code != 127 || !strings.Contains(r.stderr.String(), "cannot run no-such-command-for-plug") {
		t.Errorf("a missing CMD: exit %d, want 127; stderr:\n%s", code, r.stderr)
	}
}

// TestRunSecondInterruptForces: CMD ignores Ctrl-C; a second one stops
// plug at once.
func TestRunSecondInterruptForces(t *testing.T) {
	w := newWorld(t)
	local := freePort(t)
	r := w.start(t, append(helperEnv(local, 7), "PLUG_TEST_IGNORE_INT=1"), "-p", "test", "-s", fmt.Sprintf("web:80:%d", local), "--", os.Args[0])
	clustertest.Until(t, clustertest.Settle, "web:80 to be served", func() bool { _, err := w.greeting("web:80"); return err == nil })
	r.cmd.Process.Signal(os.Interrupt)
	// Two signals sent at once may arrive as one: send the second once CMD
	// has the first.
	clustertest.Until(t, clustertest.Settle, "CMD to get the first interrupt", func() bool {
		return strings.Contains(r.stderr.String(), "helper: ignoring SIGINT")
	})
	select {
	case <-r.exited:
		t.Fatalf("plug exited after one interrupt although CMD ignores it; stderr:\n%s", r.stderr)
	default:
	}
	r.cmd.Process.Signal(os.Interrupt)
	if code := r.wait(t); code != 128+int(syscall.SIGINT) {
		t.Errorf("exit %d after a second interrupt, want %d", code, 128+int(syscall.SIGINT))
	}
	clustertest.Until(t, clustertest.Settle, "the helper to be gone", func() bool { _, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", local)); return err != nil })
}

// TestRunEndedByAgent: the agent ends the run; plug says why, stops CMD as
// Ctrl-C would, and exits with 4.
func TestRunEndedByAgent(t *testing.T) {
	w := newWorld(t)
	local := freePort(t)
	r := w.start(t, helperEnv(local, 0), "-p", "test", "-s", fmt.Sprintf("web:80:%d", local), "--", os.Args[0])
	var held tunnel.Binding
	clustertest.Until(t, clustertest.Settle, "web to be served", func() bool {
		var ok bool
		held, ok = w.platform.Held("web")
		return ok
	})
	if err := w.agent.EndRun(held.Holder.Run, "the cluster admin", "maintenance at noon"); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(t); code != 4 {
		t.Errorf("plug exited with %d, want 4", code)
	}
	for _, want := range []string{"the run was ended by the cluster admin: maintenance at noon", "stopping " + os.Args[0]} {
		if !strings.Contains(r.stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
}

// TestRunConnectionErrors: nothing to connect to, or an agent with another
// host key: exit 3 with the tunnel's explanation, and CMD never runs.
func TestRunConnectionErrors(t *testing.T) {
	w := newWorld(t)
	closed := freePort(t)
	otherKey := keys.AuthorizedKey(newHostKey(t))
	_, port, _ := net.SplitHostPort(w.proxy.Addr())
	w.plugOK(t, "profile", "add", "nowhere", "--host", "127.0.0.1", "--port", strconv.Itoa(closed), "--host-key", otherKey)
	w.plugOK(t, "keygen", "-p", "nowhere")
	w.plugOK(t, "profile", "add", "impostor", "--host", "127.0.0.1", "--port", port, "--host-key", otherKey)
	w.plugOK(t, "keygen", "-p", "impostor")
	for _, tc := range []struct{ profile, want string }{
		{"nowhere", "connection refused"},
		{"impostor", "but the profile pins " + keys.Fingerprint(mustParse(t, otherKey))},
	} {
		marker := filepath.Join(t.TempDir(), "ran")
		r := w.start(t, nil, "-p", tc.profile, "-c", "--", "touch", marker)
		if code := r.wait(t); code != 3 {
			t.Errorf("%s: exit %d, want 3", tc.profile, code)
		}
		if !strings.Contains(r.stderr.String(), tc.want) {
			t.Errorf("%s: stderr lacks %q:\n%s", tc.profile, tc.want, r.stderr)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Errorf("%s: CMD ran although plug could not connect", tc.profile)
		}
	}
}

// TestBadUsageExitsTwo: a refused run exits 2 from the real binary too.
func TestBadUsageExitsTwo(t *testing.T) {
	w := newWorld(t)
	r := w.start(t, nil, "-p", "test", "-s", "web:0:3000", "--", "true")
	if code := r.wait(t); code != 2 || !strings.Contains(r.stderr.String(), "e.g. -s web:8080:3000") {
		t.Errorf("exit %d, stderr:\n%s", r.wait(t), r.stderr)
	}
	if n := len(w.platform.Calls()); n != 0 {
		t.Errorf("a refused run made %d platform calls", n)
	}
}

func TestVersion(t *testing.T) {
	out, err := exec.Command(plugBin, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "plug "+tunnel.Version+" ") {
		t.Errorf("plug version: %q %v", out, err)
	}
}

func newHostKey(t *testing.T) ssh.PublicKey {
	t.Helper()
	pub, err := keys.Open(t.TempDir()).GenerateKey("agent", "", false)
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

func mustParse(t *testing.T, line string) ssh.PublicKey {
	t.Helper()
	k, err := keys.ParseHostKey(line)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
