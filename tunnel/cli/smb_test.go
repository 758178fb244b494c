package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSmbUsage(t *testing.T) {
	for _, args := range [][]string{{"smb", "--help"}, {"help", "smb"}} {
		code, out, _ := plug(t, args...)
		if code != 0 || !strings.Contains(out, "Usage: plug smb") || !strings.Contains(out, "PLUG_SMB_PASSWORD") {
			t.Errorf("plug %v: exit %d\n%s", args, code, out)
		}
	}
}

// TestSmbRefusesBadInput checks what plug smb refuses before it listens.
func TestSmbRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0644)
	cases := []struct {
		name       string
		user, pass string
		args       []string
		code       int
		want       string
	}{
		{"no credential", "", "", []string{"--share", "data", dir}, ExitUsage, "set PLUG_SMB_USER and PLUG_SMB_PASSWORD"},
		{"no password", "me", "", []string{"--share", "data", dir}, ExitUsage, "set PLUG_SMB_USER and PLUG_SMB_PASSWORD"},
		{"no share", "me", "pw", []string{dir}, ExitUsage, "--share NAME"},
		{"bad share", "me", "pw", []string{"--share", "da ta", dir}, ExitUsage, "use only letters"},
		{"IPC$", "me", "pw", []string{"--share", "IPC$", dir}, ExitUsage, "use only letters"},
		{"no directory", "me", "pw", []string{"--share", "data"}, ExitUsage, "give one directory"},
		{"two directories", "me", "pw", []string{"--share", "data", dir, dir}, ExitUsage, "give one directory"},
		{"missing directory", "me", "pw", []string{"--share", "data", filepath.Join(dir, "nope")}, ExitFailed, "no such file"},
		{"a file", "me", "pw", []string{"--share", "data", file}, ExitFailed, "is not a directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("PLUG_SMB_USER", c.user)
			t.Setenv("PLUG_SMB_PASSWORD", c.pass)
			code, _, stderr := plug(t, append([]string{"smb", "--addr", "127.0.0.1:1"}, c.args...)...)
			if code != c.code || !strings.Contains(stderr, c.want) {
				t.Errorf("exit %d, want %d with %q:\n%s", code, c.code, c.want, stderr)
			}
			if c.pass != "" && strings.Contains(stderr, c.pass) && len(c.pass) > 3 {
				t.Errorf("the password reached stderr")
			}
		})
	}
}
