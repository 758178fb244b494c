package cli

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// With PLUG_TEST_PLUG=1 the test binary is plug itself, for tests that
// need plug as a process of its own (and the names helper stays the
// helper).
func init() {
	if os.Getenv("PLUG_TEST_PLUG") == "1" && (len(os.Args) < 2 || os.Args[1] != namesHelperArg) {
		os.Exit(Main(os.Args[1:]))
	}
}

// TestKill9LeavesNothing: plug killed with SIGKILL mid-run leaves nothing
// on the machine — the machine's /etc/hosts and mounts are as they were,
// no file is left behind, its addresses and ports are free — and the next
// run works. CMD, which outlives plug, keeps its private view until it
// ends.
func TestKill9LeavesNothing(t *testing.T) {
	if !asUser(t) {
		return
	}
	c := newCluster(t, useHome(t), "shop")
	c.platform.SetNames(k8sName("web", "shop", 18080))
	c.workload(t, "web:18080", "hello from web")
	hostsBefore, tmpBefore := fileSum(t, "/etc/hosts"), ownFiles(t, os.TempDir())

	dir := t.TempDir()
	self, _ := os.Executable()
	plug := exec.Command(self, "-p", "shop", "-c", "--", "sh", "-c", "getent hosts web | cut -f1 -d' ' > "+dir+"/addr; echo $$ > "+dir+"/pid; exec sleep 60")
	plug.Env = append(os.Environ(), "PLUG_TEST_PLUG=1")
	if err := plug.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(dir, "pid"), 10*time.Second)
	addr := strings.TrimSpace(readText(t, filepath.Join(dir, "addr")))
	cmdPID := readText(t, filepath.Join(dir, "pid"))
	defer exec.Command("kill", "-9", cmdPID).Run()
	target := net.JoinHostPort(addr, "18080")
	if c, err := net.Dial("tcp", target); err != nil {
		t.Fatalf("web's address %s does not answer during the run: %v", target, err)
	} else {
		c.Close()
	}
	if !claimed(t, addr) {
		t.Fatalf("%s is not claimed during the run", addr)
	}

	plug.Process.Signal(syscall.SIGKILL)
	plug.Wait()

	if _, err := net.DialTimeout("tcp", target, time.Second); err == nil {
		t.Errorf("%s still answers after plug was killed", target)
	}
	if claimed(t, addr) {
		t.Errorf("%s is still claimed after plug was killed", addr)
	}
	if fileSum(t, "/etc/hosts") != hostsBefore {
		t.Error("the machine's /etc/hosts changed")
	}
	if m := plugMounts(t); m != "" {
		t.Errorf("the machine has plug's mounts:\n%s", m)
	}
	if inside, err := os.ReadFile("/proc/" + cmdPID + "/mountinfo"); err != nil || !strings.Contains(string(inside), " /etc/hosts ") {
		t.Errorf("CMD, still running, lost its private /etc/hosts (%v)", err)
	}
	if left := ownFiles(t, os.TempDir()); left != tmpBefore {
		t.Errorf("files were left in %s:\nbefore %s\nafter  %s", os.TempDir(), tmpBefore, left)
	}
	code, stdout, stderr := runPlug(t, "-p", "shop", "-c", "--", "curl", "-sS", "--max-time", "5", "http://web.shop:18080/")
	if code != 0 || stdout != "hello from web\n" {
		t.Fatalf("the next run: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

// plugMounts are the mounts of the machine (as this process sees it) that
// a run could have made: on /etc/hosts, or plug's tmpfs.
func plugMounts(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, " /etc/hosts ") || strings.Contains(line, "plug-hosts") {
			found = append(found, line)
		}
	}
	return strings.Join(found, "\n")
}

// ownFiles lists the entries of dir this user owns, but the test's own
// temporary directories.
func ownFiles(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || strings.HasPrefix(e.Name(), "Test") {
			continue
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) == os.Getuid() {
			names = append(names, e.Name())
		}
	}
	return strings.Join(names, " ")
}

// claimed reports whether a run holds addr's claim.
func claimed(t *testing.T, addr string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), "@plug/loopback/"+addr+"\n")
}
