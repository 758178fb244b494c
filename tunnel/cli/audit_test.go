package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"plug/tunnel"
)

// fakeProc makes a /proc entry of a process with cmdline, whose standard
// output is a file; it returns the entry and that file.
func fakeProc(t *testing.T, cmdline string) (proc, stdout string) {
	t.Helper()
	proc = filepath.Join(t.TempDir(), "4242")
	if err := os.MkdirAll(filepath.Join(proc, "fd"), 0o700); err != nil {
		t.Fatal(err)
	}
	stdout = filepath.Join(proc, "fd", "1")
	if err := os.WriteFile(stdout, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "cmdline"), []byte(cmdline), 0o600); err != nil {
		t.Fatal(err)
	}
	return proc, stdout
}

// An operator's change of the members (plug agent members, beside the
// agent) reaches the agent's audit trail: its standard output, and the
// audit file, as well as the operator's terminal; a process that is not
// the agent gets nothing.
func TestOperatorChangesReachTheAgentsTrail(t *testing.T) {
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	t.Setenv("PLUG_AUDIT_FILE", file)
	agent, agentOut := fakeProc(t, "/plug\x00agent\x00")
	other, otherOut := fakeProc(t, "/bin/sh\x00-c\x00plug agent\x00")
	e := tunnel.AuditEvent{Event: tunnel.AuditKeyAdmin, Key: "SHA256:abc", By: "the operator"}
	for _, proc := range []string{agent, other} {
		var out bytes.Buffer
		c := newCLI(strings.NewReader(""), &out, &bytes.Buffer{})
		sink, err := c.operatorAuditSink(proc)
		if err != nil {
			t.Fatal(err)
		}
		sink(e)
		if !strings.Contains(out.String(), `"event":"key.admin"`) {
			t.Errorf("the operator's terminal does not show the change: %q", out.String())
		}
	}
	for path, want := range map[string]int{agentOut: 1, otherOut: 0, file: 2} {
		data, _ := os.ReadFile(path)
		if got := strings.Count(string(data), `"event":"key.admin","key":"SHA256:abc","by":"the operator"`); got != want {
			t.Errorf("%s holds the change %d times, want %d:\n%s", filepath.Base(path), got, want, data)
		}
	}
	t.Setenv("PLUG_AUDIT_FILE_MAX", "12")
	if _, err := newCLI(strings.NewReader(""), &bytes.Buffer{}, &bytes.Buffer{}).auditSink(); err == nil || !strings.Contains(err.Error(), "PLUG_AUDIT_FILE_MAX") {
		t.Errorf("a bound of 12 bytes: %v", err)
	}
}
