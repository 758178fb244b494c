package k8sapitest

import (
	"fmt"
	"net/http"

	"plug/k8sapi"
	"plug/tunnel/tunneltest/faults"
)

// Fault changes how the server answers some requests (see faults.Fault):
// a Code is answered with the Status body and reason the API server gives
// that code (409 Conflict, 500 InternalError, 503 ServiceUnavailable, ...).
type Fault = faults.Fault[Request]

// Injection is a Fault in effect: Applied counts the requests it applied
// to, Remove ends it.
type Injection = faults.Injection[Request]

// Inject puts f into effect from the next request on, until removed.
// When several faults apply to a request, the first injected decides.
func (s *Server) Inject(f Fault) *Injection { return s.faults.Inject(f) }

// On returns a Fault.Match selecting the requests of verb on resource
// called name; an empty argument matches any.
func On(verb, resource, name string) func(Request) bool {
	return func(r Request) bool {
		return (verb == "" || r.Verb == verb) && (resource == "" || r.Resource == resource) && (name == "" || r.Name == name)
	}
}

// apiError is a failure, as the Status the server answers with.
type apiError struct {
	code    int
	reason  string
	message string
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.code, k8sapi.Status{Status: "Failure", Code: e.code, Reason: e.reason, Message: e.message})
}

func errNotFound(format string, args ...any) *apiError {
	return &apiError{http.StatusNotFound, k8sapi.ReasonNotFound, fmt.Sprintf(format, args...)}
}

func notFound(kind k8sapi.Kind, name string) *apiError {
	return errNotFound("%s %q not found", kind.Resource, name)
}

func conflict(kind k8sapi.Kind, name, why string) *apiError {
	return &apiError{http.StatusConflict, k8sapi.ReasonConflict, fmt.Sprintf("Operation cannot be fulfilled on %s %q: %s", kind.Resource, name, why)}
}

func invalid(kind k8sapi.Kind, name, format string, args ...any) *apiError {
	return &apiError{http.StatusUnprocessableEntity, k8sapi.ReasonInvalid, fmt.Sprintf("%s %q is invalid: %s", kind.Name, name, fmt.Sprintf(format, args...))}
}

func badRequest(format string, args ...any) *apiError {
	return &apiError{http.StatusBadRequest, "BadRequest", fmt.Sprintf(format, args...)}
}

func forbidden(a k8sapi.ResourceAttributes) *apiError {
	what := a.Resource
	if a.Name != "" {
		what += fmt.Sprintf(" %q", a.Name)
	}
	return &apiError{http.StatusForbidden, k8sapi.ReasonForbidden, fmt.Sprintf(
		"%s is forbidden: User \"system:serviceaccount:%s:test\" cannot %s resource %q in API group %q in the namespace %q",
		what, a.Namespace, a.Verb, a.Resource, a.Group, a.Namespace)}
}

// injected is the answer of an injected fault with code to req.
func injected(code int, req Request) *apiError {
	reasons := map[int]string{
		http.StatusConflict:            k8sapi.ReasonConflict,
		http.StatusInternalServerError: "InternalError",
		http.StatusServiceUnavailable:  "ServiceUnavailable",
		http.StatusTooManyRequests:     "TooManyRequests",
		http.StatusGatewayTimeout:      "Timeout",
		http.StatusForbidden:           k8sapi.ReasonForbidden,
		http.StatusNotFound:            k8sapi.ReasonNotFound,
		http.StatusGone:                k8sapi.ReasonExpired,
	}
	reason, ok := reasons[code]
	if !ok {
		reason = http.StatusText(code)
	}
	return &apiError{code, reason, fmt.Sprintf("injected by the test: %s answered %d %s", req, code, reason)}
}
