package cli

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"plug/tunnel/clustertest"
)

// TestLowPortsSetupAndUndo runs the step on stand-in files: setup records
// the value it replaces, a second setup changes nothing, undo restores it
// and removes the file; undo leaves a value changed since alone.
func TestLowPortsSetupAndUndo(t *testing.T) {
	dir := t.TempDir()
	l := lowPorts{conf: filepath.Join(dir, "60-plug.conf"), sysctl: filepath.Join(dir, "ip_unprivileged_port_start")}
	writeText(t, l.sysctl, "1024\n")
	said, err := l.apply()
	if err != nil || !strings.Contains(said, "is 0 (was 1024)") || readText(t, l.sysctl) != "0" {
		t.Fatalf("setup: %q, %v; value %q", said, err, readText(t, l.sysctl))
	}
	if said, err := l.apply(); err != nil || !strings.Contains(said, "already") {
		t.Fatalf("second setup: %q, %v", said, err)
	}
	said, err = l.undo()
	if err != nil || readText(t, l.sysctl) != "1024" || pathExists(l.conf) {
		t.Fatalf("undo: %q, %v; value %q, file left: %t", said, err, readText(t, l.sysctl), pathExists(l.conf))
	}
	if said, err := l.undo(); said != "" || err != nil {
		t.Fatalf("second undo: %q, %v", said, err)
	}

	l.apply()
	writeText(t, l.sysctl, "500\n")
	if said, _ := l.undo(); !strings.Contains(said, "changed since (500)") || readText(t, l.sysctl) != "500" {
		t.Fatalf("undo after a change by someone else: %q, value %q", said, readText(t, l.sysctl))
	}
	// A file setup did not write is never removed.
	writeText(t, l.conf, "net.ipv4.ip_unprivileged_port_start = 80\n")
	if said, _ := l.undo(); said != "" || !pathExists(l.conf) {
		t.Fatalf("undo touched a file it did not write: %q", said)
	}
}

func writeText(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readText(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func pathExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestSetupAndUndo prepares this very machine, checks that an unprivileged
// developer's run then answers a Service's port 80 by name, and that
// plug setup --undo leaves the machine as it found it. A machine that plug
// setup prepared before is unprepared first, and prepared again as it was
// when the test ends (keepMachine).
func TestSetupAndUndo(t *testing.T) {
	if os.Getenv("PLUG_TEST_AFTER_SETUP") != "" {
		lowPortAnswers(t) // the run as the developer, below
		return
	}
	if os.Geteuid() != 0 {
		clustertest.Unavailable(t, "plug setup changes the machine: run the tests as root to test it")
	}
	keepMachine(t)
	if code, stdout, stderr := runPlug(t, "setup", "--undo"); code != 0 {
		t.Fatalf("plug setup --undo of an earlier setup: exit %d\n%s%s", code, stdout, stderr)
	}
	before := machineState(t)
	code, stdout, stderr := runPlug(t, "setup")
	t.Logf("plug setup:\n%s%s", stdout, stderr)
	if code != 0 || readText(t, "/proc/sys/net/ipv4/ip_unprivileged_port_start") != "0" {
		t.Fatalf("plug setup: exit %d", code)
	}
	prepared := machineState(t)
	if code, stdout, _ := runPlug(t, "setup"); code != 0 || !maps.Equal(machineState(t), prepared) || !strings.Contains(stdout, "already") {
		t.Fatalf("plug setup again changed something, or failed (exit %d):\n%s", code, stdout)
	}
	runAsUser(t, "TestSetupAndUndo", "PLUG_TEST_AFTER_SETUP=1")
	code, stdout, stderr = runPlug(t, "setup", "--undo")
	t.Logf("plug setup --undo:\n%s%s", stdout, stderr)
	if code != 0 {
		t.Fatalf("plug setup --undo: exit %d", code)
	}
	if after := machineState(t); !maps.Equal(after, before) {
		t.Fatalf("the machine differs after plug setup --undo:\nbefore %v\nafter  %v", before, after)
	}
}

// lowPortAnswers: a Service on port 80 answers by name once plug setup has
// run; before, plug says to run it (TestBadNamesAndPortsLeaveTheRestWorking).
func lowPortAnswers(t *testing.T) {
	c := newCluster(t, useHome(t), "shop")
	c.platform.SetNames(k8sName("web", "shop", 80))
	c.workload(t, "web:80", "hello from web")
	code, stdout, stderr := runPlug(t, "-p", "shop", "-c", "--", "curl", "-sS", "--max-time", "5", "http://web/")
	if code != 0 || !strings.Contains(stdout, "hello from web") {
		t.Fatalf("port 80 does not answer after plug setup: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

// setupFiles are what plug setup may change on Linux, by the name
// machineState gives each.
var setupFiles = map[string]string{
	"net.ipv4.ip_unprivileged_port_start": "/proc/sys/net/ipv4/ip_unprivileged_port_start",
	"/etc/sysctl.d/60-plug.conf":          "/etc/sysctl.d/60-plug.conf",
	"/etc/apparmor.d/plug":                "/etc/apparmor.d/plug",
}

// absent is machineState's value for a file that does not exist.
const absent = "(absent)"

// machineState is what plug setup may change on Linux.
func machineState(t *testing.T) map[string]string {
	t.Helper()
	state := map[string]string{}
	for key, path := range setupFiles {
		b, err := os.ReadFile(path)
		switch {
		case os.IsNotExist(err):
			state[key] = absent
		case err != nil:
			t.Fatal(err)
		default:
			state[key] = string(b)
		}
	}
	return state
}

// keepMachine puts back, when t ends, what plug setup may change, as t
// found it: a developer who ran plug setup keeps it through the tests,
// whatever they set up and undo. What t set up is undone first (plug setup
// --undo), then each file and the sysctl get the value they had; a profile
// that was loaded into AppArmor is loaded again.
func keepMachine(t *testing.T) {
	t.Helper()
	found := machineState(t)
	t.Cleanup(func() {
		if code, stdout, stderr := runPlug(t, "setup", "--undo"); code != 0 {
			t.Errorf("plug setup --undo at the end: exit %d\n%s%s", code, stdout, stderr)
		}
		for key, path := range setupFiles {
			var err error
			switch {
			case found[key] == absent:
				if err = os.Remove(path); os.IsNotExist(err) {
					err = nil
				}
			case key == "/etc/apparmor.d/plug":
				if err = os.WriteFile(path, []byte(found[key]), 0o644); err == nil {
					err = exec.Command("apparmor_parser", "-r", path).Run()
				}
			default:
				err = os.WriteFile(path, []byte(found[key]), 0o644)
			}
			if err != nil {
				t.Errorf("putting back %s: %v", key, err)
			}
		}
		if now := machineState(t); !maps.Equal(now, found) {
			t.Errorf("the machine is not as the test found it:\nfound %v\nnow   %v", found, now)
		}
	})
}

// TestSetupUserIsForHostsFiles: on Linux, plug setup grants no account
// anything, and --user is refused with why, changing nothing.
func TestSetupUserIsForHostsFiles(t *testing.T) {
	code, stdout, stderr := runPlug(t, "setup", "--user", "bob")
	if code == 0 || stdout != "" || !strings.Contains(stderr, "--user names the account that may write the hosts file on macOS and Windows; plug setup on Linux grants no account anything") {
		t.Fatalf("exit %d\nstdout %q\nstderr %q", code, stdout, stderr)
	}
}
