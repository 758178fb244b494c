package cli

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
)

// The tests of what an unprivileged developer sees run as such: run as
// root, asUser runs the test again in a copy of the test binary as the
// user plug-dev (created when missing), with setpriv.

// devUser is the unprivileged account the tests run as.
const devUser = "plug-dev"

// asUser runs the calling test as devUser when the tests run as root, with
// env added to its environment, and returns false: the caller returns at
// once, its outcome being that of the run as devUser. It returns true when
// the test already runs unprivileged.
func asUser(t *testing.T, env ...string) bool {
	t.Helper()
	if os.Geteuid() != 0 {
		return true
	}
	if os.Getenv("PLUG_TEST_AS_USER") != "" {
		t.Fatal("the test runs as root although it was started as " + devUser)
	}
	runAsUser(t, t.Name(), env...)
	return false
}

// runAsUser runs the test named test as devUser, in a copy of the test
// binary, and fails t if it does not pass.
func runAsUser(t *testing.T, test string, env ...string) {
	t.Helper()
	u := ensureUser(t)
	dir, err := os.MkdirTemp("", "plug-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "cli.test")
	copyFile(t, "/proc/self/exe", bin)
	cmd := exec.Command("setpriv", "--reuid="+u.Uid, "--regid="+u.Gid, "--clear-groups", "--",
		bin, "-test.run", "^"+test+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "PLUG_TEST_AS_USER=1", "HOME="+u.HomeDir, "USER="+devUser, "LOGNAME="+devUser, "TMPDIR=/tmp", "GOCACHE=/nonexistent", "PATH=/usr/local/bin:/usr/bin:/bin")
	cmd.Env = append(cmd.Env, env...)
	cmd.Dir = "/"
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("%s as %s:\n%s", test, devUser, out.String())
	if err != nil || !strings.Contains(out.String(), "--- PASS: "+test) {
		t.Fatalf("%s failed as %s: %v", test, devUser, err)
	}
}

// ensureUser returns devUser, creating it if needed.
func ensureUser(t *testing.T) *user.User {
	t.Helper()
	if u, err := user.Lookup(devUser); err == nil {
		return u
	}
	if out, err := exec.Command("useradd", "--create-home", "--shell", "/bin/sh", devUser).CombinedOutput(); err != nil {
		t.Fatalf("useradd %s: %v: %s", devUser, err, out)
	}
	u, err := user.Lookup(devUser)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
