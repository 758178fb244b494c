package cli

import (
	"strings"
	"testing"
)

// plug version says its version, then the commit and build time build.sh
// stamped, or that none was.
func TestVersionNamesTheCommitAndItsTime(t *testing.T) {
	dir := t.TempDir()
	stamped := buildVersion(t, dir, "stamped", "v1.2.3",
		"-X plug/tunnel.Commit=85bf068dd1a9926d1a27a48a8794f538da847817 -X plug/tunnel.BuildTime=2026-12-04T19:56:29Z")
	plain := buildVersion(t, dir, "plain", "v1.2.3")
	for bin, second := range map[string]string{
		stamped: "commit 85bf068dd1a9926d1a27a48a8794f538da847817, built 2026-12-04T19:56:29Z",
		plain:   "commit unknown (not built by build.sh)",
	} {
		_, stdout, _ := runBinary(t, bin, "version")
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "plug v1.2.3 ") || lines[1] != second {
			t.Errorf("plug version:\n%s\nwant a second line %q", stdout, second)
		}
	}
}
