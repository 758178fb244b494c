package k8sapi

import (
	"errors"
	"fmt"
	"net/http"
)

// Status is the body the API server sends with a failure (and inside a
// watch ERROR event).
type Status struct {
	Status  string        `json:"status,omitempty"` // "Failure"
	Message string        `json:"message,omitempty"`
	Reason  string        `json:"reason,omitempty"` // e.g. "NotFound", "Conflict"
	Details StatusDetails `json:"details,omitzero"`
	Code    int           `json:"code,omitempty"`
}

// StatusDetails names the object a Status is about, and its causes.
type StatusDetails struct {
	Name   string        `json:"name,omitempty"`
	Kind   string        `json:"kind,omitempty"`
	Group  string        `json:"group,omitempty"`
	Causes []StatusCause `json:"causes,omitempty"`
}

// StatusCause is one cause of a Status, e.g. the exit code of a command
// that exec ran (reason "ExitCode").
type StatusCause struct {
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// Status reasons plug tells apart.
const (
	ReasonNotFound      = "NotFound"
	ReasonAlreadyExists = "AlreadyExists"
	ReasonConflict      = "Conflict"
	ReasonForbidden     = "Forbidden"
	ReasonUnauthorized  = "Unauthorized"
	ReasonGone          = "Gone"
	ReasonExpired       = "Expired"
	ReasonInvalid       = "Invalid"
)

// APIError is a request the API server answered with a failure.
type APIError struct {
	Method string // the request's method, "WATCH" for a watch event
	Path   string // the request's path
	Code   int    // HTTP status code
	Reason string // Status.Reason, or derived from Code when the body had none
	Text   string // Status.Message, or the start of a body that was not a Status
}

func (e *APIError) Error() string {
	msg := e.Text
	if msg == "" {
		msg = http.StatusText(e.Code)
	}
	return fmt.Sprintf("kubernetes API %s %s: %d %s: %s", e.Method, e.Path, e.Code, e.Reason, msg)
}

// reasonFor is the Status reason the API server uses with code, for bodies
// that carry none (a proxy in the way, an old server).
func reasonFor(code int) string {
	switch code {
	case http.StatusNotFound:
		return ReasonNotFound
	case http.StatusConflict:
		return ReasonConflict
	case http.StatusForbidden:
		return ReasonForbidden
	case http.StatusUnauthorized:
		return ReasonUnauthorized
	case http.StatusGone:
		return ReasonGone
	case http.StatusUnprocessableEntity:
		return ReasonInvalid
	}
	return http.StatusText(code)
}

func reasonIs(err error, reasons ...string) bool {
	var e *APIError
	if !errors.As(err, &e) {
		return false
	}
	for _, r := range reasons {
		if e.Reason == r {
			return true
		}
	}
	return false
}

// IsNotFound reports whether err says the object does not exist.
func IsNotFound(err error) bool { return reasonIs(err, ReasonNotFound) }

// IsAlreadyExists reports whether err says a create found the name taken.
func IsAlreadyExists(err error) bool { return reasonIs(err, ReasonAlreadyExists) }

// IsConflict reports whether err says a write lost a race: the object's
// resourceVersion was not the one the write was based on.
func IsConflict(err error) bool { return reasonIs(err, ReasonConflict) }

// IsForbidden reports whether err says the caller lacks the right.
func IsForbidden(err error) bool { return reasonIs(err, ReasonForbidden) }

// IsGone reports whether err says a resourceVersion is too old to watch
// from, so the caller must list again.
func IsGone(err error) bool { return reasonIs(err, ReasonGone, ReasonExpired) }

// IsInvalid reports whether err says the server refused the object as
// invalid.
func IsInvalid(err error) bool { return reasonIs(err, ReasonInvalid) }
