package handout

import (
	"strings"
	"testing"
)

func FuzzParseGetCommand(f *testing.F) {
	for _, s := range []string{"install", "install-windows", "download linux-amd64", "sha256 windows-arm64", "download-gz darwin-arm64", "download ../../etc/passwd"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		cmd, err := parseGetCommand(line)
		if err != nil {
			return
		}
		if strings.ContainsAny(binaryName(cmd.platform), "/\\") || strings.Contains(cmd.platform, "..") {
			t.Fatalf("%q names a path: %q", line, cmd.platform)
		}
	})
}
