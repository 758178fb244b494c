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

	"plug/tunnel/clustertest"
)

// TestKill9LeavesNothing: plug killed with SIGKILL mid-run leaves nothing
// on the machine — CMD and the process it started are gone within a
// second, the machine's /etc/hosts and mounts are as they were, no file is
// left behind, its addresses and ports are free — and the next run works.
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
	plug := exec.Command(self, "-p", "shop", "-c", "--", "sh", "-c", "getent hosts web | cut -f1 -d' ' > "+dir+"/addr; sleep 60 & echo $! > "+dir+"/child; echo $$ > "+dir+"/pid; exec sleep 60")
	plug.Env = append(os.Environ(), "PLUG_TEST_PLUG=1")
	if err := plug.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(dir, "pid"), clustertest.Settle)
	addr := strings.TrimSpace(readText(t, filepath.Join(dir, "addr")))
	cmdPID, childPID := strings.TrimSpace(readText(t, filepath.Join(dir, "pid"))), strings.TrimSpace(readText(t, filepath.Join(dir, "child")))
	defer exec.Command("kill", "-9", cmdPID, childPID).Run()
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
	killed := time.Now()
	// README: CMD and every process it started end with plug, "within a
	// second" — plug's own lifeline, so the deadline is that second.
	for _, pid := range []string{cmdPID, childPID} {
		clustertest.Until(t, time.Second-time.Since(killed), "plug's lifeline to end CMD's process "+pid+" after plug was killed", func() bool { return !running(pid) })
	}
	t.Logf("CMD and its child were gone %v after plug was killed", time.Since(killed).Round(time.Millisecond))

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
	if left := ownFiles(t, os.TempDir()); left != tmpBefore {
		t.Errorf("files were left in %s:\nbefore %s\nafter  %s", os.TempDir(), tmpBefore, left)
	}
	code, stdout, stderr := runPlug(t, "-p", "shop", "-c", "--", "curl", "-sS", "--max-time", "5", "http://web.shop:18080/")
	if code != 0 || stdout != "hello from web\n" {
		t.Fatalf("the next run: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

// running reports whether process pid exists and has not exited.
func running(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	end := strings.LastIndexByte(string(b), ')')
	return end < 0 || !strings.HasPrefix(strings.TrimSpace(string(b[end+1:])), "Z")
}

// plugMounts are the mounts of the machine (as this process sees it) that
// a run could have made: on /etc/hosts or /etc/resolv.conf, or plug's
// tmpfs.
func plugMounts(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, " /etc/hosts ") || strings.Contains(line, " /etc/resolv.conf ") || strings.Contains(line, "plug-hosts") {
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
