package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
