package k8sapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// Exec runs a command in a running container, as `kubectl exec` does, over
// the WebSocket protocol of the API server (v5.channel.k8s.io, or
// v4.channel.k8s.io): each message is a stream number, then its bytes.
// The RBAC rules it needs are get and create on pods/exec.

// Streams of the channel protocols.
const (
	streamStdout = 1
	streamStderr = 2
	streamError  = 3
)

// execProtocols are the channel protocols Exec speaks, preferred first:
// both carry the command's outcome as a Status on the error stream.
var execProtocols = []string{"v5.channel.k8s.io", "v4.channel.k8s.io"}

// maxExecStderr bounds the standard error Exec keeps for an ExecError.
const maxExecStderr = 4 << 10

// ExecError is a command that could not run, or ran and failed.
type ExecError struct {
	// ExitCode is the command's exit code; -1 when it did not run or the
	// server did not say.
	ExitCode int
	Message  string // the server's words, e.g. `exec: "env": executable file not found in $PATH`
	Stderr   string // the start of what the command wrote on standard error
}

func (e *ExecError) Error() string {
	msg := e.Message
	if e.Stderr != "" {
		msg += " (stderr: " + e.Stderr + ")"
	}
	return msg
}

// Exec runs command in container of pod in namespace ns, without standard
// input or a terminal, and returns its standard output. More than maxOut
// bytes of output is an error. A command that fails, or cannot be run, is
// an *ExecError; a refusal of the API server (Forbidden, NotFound) is an
// *APIError. The command ends when ctx does.
func (c *Client) Exec(ctx context.Context, ns, pod, container string, command []string, maxOut int) ([]byte, error) {
	q := url.Values{"command": command, "container": {container}, "stdout": {"true"}, "stderr": {"true"}}
	path := KindPod.collectionPath(ns) + "/" + url.PathEscape(pod) + "/exec"
	ws, err := c.dialWebSocket(ctx, request{method: http.MethodGet, path: path, query: q}, execProtocols)
	if err != nil {
		return nil, err
	}
	defer ws.Close()
	var stdout, stderr []byte
	var status *Status
	for {
		msg, err := ws.next(maxOut + 1)
		if err != nil && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, errWSClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if errors.Is(err, errWSTooLarge) {
			return nil, fmt.Errorf("exec in %s/%s: the command wrote more than %d bytes", pod, container, maxOut)
		}
		if err != nil {
			if status != nil {
				break // the outcome is known; a connection dropped after it does not matter
			}
			return nil, fmt.Errorf("exec in %s/%s: %w", pod, container, err)
		}
		if len(msg) == 0 {
			continue
		}
		data := msg[1:]
		switch msg[0] {
		case streamStdout:
			if len(stdout)+len(data) > maxOut {
				return nil, fmt.Errorf("exec in %s/%s: the command wrote more than %d bytes", pod, container, maxOut)
			}
			stdout = append(stdout, data...)
		case streamStderr:
			stderr = append(stderr, data[:min(len(data), maxExecStderr-len(stderr))]...)
		case streamError:
			var st Status
			if err := json.Unmarshal(data, &st); err != nil {
				return nil, fmt.Errorf("exec in %s/%s: the outcome is not a Status: %w", pod, container, err)
			}
			status = &st
		}
	}
	if status == nil {
		return nil, fmt.Errorf("exec in %s/%s: the connection closed before the command's outcome", pod, container)
	}
	if status.Status == "Success" {
		return stdout, nil
	}
	e := &ExecError{ExitCode: -1, Message: status.Message, Stderr: string(stderr)}
	for _, cause := range status.Details.Causes {
		if cause.Reason == "ExitCode" {
			if n, err := strconv.Atoi(cause.Message); err == nil {
				e.ExitCode = n
			}
		}
	}
	return nil, e
}
