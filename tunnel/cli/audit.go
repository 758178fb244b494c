package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"plug/tunnel"
)

// auditSink is where the agent writes its audit trail: its standard
// output, and the file PLUG_AUDIT_FILE when set, set aside past
// PLUG_AUDIT_FILE_MAX bytes (tunnel.AuditFile). A setting that does not
// work is an error naming it.
func (c *cli) auditSink() (func(tunnel.AuditEvent), error) {
	sinks := []func(tunnel.AuditEvent){tunnel.AuditJSON(c.stdout)}
	path := os.Getenv("PLUG_AUDIT_FILE")
	if path == "" {
		return fanOut(sinks), nil
	}
	var max int64
	if v := os.Getenv("PLUG_AUDIT_FILE_MAX"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 4096 {
			return nil, fmt.Errorf("PLUG_AUDIT_FILE_MAX=%q is not a number of bytes of at least 4096; unset it for %d", tunnel.PeerText(v), tunnel.DefaultAuditFileMax)
		}
		max = n
	}
	f, err := tunnel.OpenAuditFile(path, max)
	if err != nil {
		return nil, fmt.Errorf("PLUG_AUDIT_FILE=%s: %v; point it at a file in a writable volume, or unset it", tunnel.PeerText(path), err)
	}
	return fanOut(append(sinks, tunnel.AuditJSON(f))), nil
}

// operatorAuditSink is the audit sink of a command the operator runs
// beside the agent (plug agent members, in the agent's container): the
// agent's own (auditSink), and the agent's standard output as well, so
// that the change is in the agent's log (kubectl logs) and not only on
// the operator's terminal. proc is the agent's /proc entry.
func (c *cli) operatorAuditSink(proc string) (func(tunnel.AuditEvent), error) {
	sink, err := c.auditSink()
	if err != nil {
		return nil, err
	}
	w, ok := agentStdout(proc)
	if !ok {
		return sink, nil
	}
	return fanOut([]func(tunnel.AuditEvent){sink, tunnel.AuditJSON(w)}), nil
}

// agentStdout opens the standard output of the process at proc when it is
// plug's agent (its command line is PATH/plug agent) other than this
// process: in the agent's container, process 1.
func agentStdout(proc string) (io.Writer, bool) {
	cmdline, err := os.ReadFile(filepath.Join(proc, "cmdline"))
	if err != nil {
		return nil, false
	}
	args := bytes.Split(bytes.TrimSuffix(cmdline, []byte{0}), []byte{0})
	if len(args) != 2 || filepath.Base(string(args[0])) != "plug" || string(args[1]) != "agent" {
		return nil, false
	}
	if self, err := os.Readlink("/proc/self"); err == nil && self == filepath.Base(proc) {
		return nil, false
	}
	f, err := os.OpenFile(filepath.Join(proc, "fd", "1"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil, false
	}
	return f, true
}

// fanOut hands each event to every sink.
func fanOut(sinks []func(tunnel.AuditEvent)) func(tunnel.AuditEvent) {
	return func(e tunnel.AuditEvent) {
		for _, s := range sinks {
			s(e)
		}
	}
}
