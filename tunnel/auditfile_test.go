package tunnel_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"plug/tunnel"
)

// The audit file gets every line whole, appended; past its bound it is set
// aside as FILE.1 (replacing the one before), so the trail on disk stays
// under twice the bound and the newest lines are kept.
func TestAuditFileAppendsAndSetsAside(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	if err := os.WriteFile(path, []byte(`{"event":"before"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := tunnel.OpenAuditFile(path, 1000)
	if err != nil {
		t.Fatal(err)
	}
	sink := tunnel.AuditJSON(f)
	for i := range 40 {
		sink(tunnel.AuditEvent{Time: time.Unix(int64(i), 0).UTC(), Event: tunnel.AuditRunOpened, Run: strings.Repeat("r", 10)})
		total := 0
		for _, p := range []string{path, path + ".1"} {
			if info, err := os.Stat(p); err == nil {
				total += int(info.Size())
			}
		}
		if total > 2000 {
			t.Fatalf("after %d lines the trail takes %d bytes, over twice the bound", i+1, total)
		}
	}
	now, _ := os.ReadFile(path)
	old, err := os.ReadFile(path + ".1")
	if err != nil {
		t.Fatalf("nothing was set aside: %v", err)
	}
	lines := strings.Split(strings.TrimSuffix(string(old)+string(now), "\n"), "\n")
	if !strings.Contains(lines[len(lines)-1], `"time":"1970-01-01T00:00:39Z"`) {
		t.Errorf("the newest line is not last: %s", lines[len(lines)-1])
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "{") || !strings.HasSuffix(l, "}") {
			t.Errorf("a line is not whole: %q", l)
		}
	}
	if info, _ := os.Stat(path); info.Mode().Perm() != 0o600 {
		t.Errorf("the audit file's mode is %v, want 0600", info.Mode().Perm())
	}
	if _, err := tunnel.OpenAuditFile(filepath.Join(t.TempDir(), "no", "such", "dir", "audit"), 0); err == nil {
		t.Error("an audit file in a directory that does not exist was accepted")
	}
}
