package swarmapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"syscall"
)

// Error is an error answer of the engine: the HTTP status and the engine's
// own message.
type Error struct {
	Method  string
	Path    string
	Status  int
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("Docker engine refused %s %s (%d): %s", e.Method, e.Path, e.Status, e.Message)
}

// IsNotFound reports whether err is the engine saying the object does not exist.
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}

// IsConflict reports whether err is the engine refusing a create because
// the name is taken.
func IsConflict(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusConflict
}

// IsOutOfSequence reports whether err is the engine refusing a service
// update made at a version that is no longer the service's current one:
// somebody else updated it first. Engines answer 500 with the swarm's
// message for this; some newer ones answer 409.
func IsOutOfSequence(err error) bool {
	var e *Error
	return errors.As(err, &e) && strings.Contains(e.Message, "update out of sequence")
}

// responseError reads the engine's {"message": "..."} from a failed answer.
func responseError(method, path string, resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var m struct{ Message string }
	if json.Unmarshal(body, &m) != nil || m.Message == "" {
		m.Message = strings.TrimSpace(string(body))
	}
	if m.Message == "" {
		m.Message = http.StatusText(resp.StatusCode)
	}
	return &Error{Method: method, Path: path, Status: resp.StatusCode, Message: m.Message}
}

// SocketError says the engine's socket could not be used at all.
type SocketError struct {
	Socket string
	Err    error
}

func (e *SocketError) Error() string {
	switch {
	case errors.Is(e.Err, fs.ErrPermission):
		return fmt.Sprintf("no permission to use the Docker socket %s%s: run plug as a user in the socket's group (in the stack file: user \"65532:GID\" with GID the socket's group on the managers), or as root",
			e.Socket, socketOwner(e.Socket))
	case errors.Is(e.Err, fs.ErrNotExist), errors.Is(e.Err, syscall.ENOENT):
		return fmt.Sprintf("no Docker socket at %s: mount the engine's socket there (volume /var/run/docker.sock:/var/run/docker.sock) or set DOCKER_HOST=unix://PATH", e.Socket)
	case errors.Is(e.Err, syscall.ECONNREFUSED):
		return fmt.Sprintf("nothing listens on the Docker socket %s: is dockerd running?", e.Socket)
	}
	return fmt.Sprintf("cannot reach the Docker engine at %s: %v", e.Socket, e.Err)
}

func (e *SocketError) Unwrap() error { return e.Err }

// socketError wraps a dial failure of the socket at path.
func socketError(path string, err error) error {
	return &SocketError{Socket: path, Err: err}
}

// asSocketError finds a *SocketError inside an error of net/http.
func asSocketError(err error) (*SocketError, bool) {
	var se *SocketError
	return se, errors.As(err, &se)
}
