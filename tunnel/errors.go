package tunnel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
)

// UnreachableError says the agent could not be reached at all.
type UnreachableError struct {
	Addr   string
	Reason string // "DNS lookup failed", "connection refused", "timed out", or what else happened
	Err    error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach the plug agent at %s: %s.\n"+
		"The agent is usually reached on NodePort 32222 of a cluster node's IP, or through\n"+
		"  kubectl -n NAMESPACE port-forward svc/plug 2222:2222\n"+
		"and then at 127.0.0.1:2222. Check the profile's host and port (plug ls).", e.Addr, e.Reason)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// unreachable classifies a failure to connect to addr.
func unreachable(addr string, err error) *UnreachableError {
	reason := err.Error()
	var dnsErr *net.DNSError
	var netErr net.Error
	switch {
	case errors.As(err, &dnsErr):
		reason = "DNS lookup failed"
	case isRefused(err):
		reason = "connection refused"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &netErr) && netErr.Timeout():
		reason = "timed out"
	}
	return &UnreachableError{Addr: addr, Reason: reason, Err: err}
}

// HostKeyError says the agent presented a host key other than the pinned one.
type HostKeyError struct {
	Addr       string
	Profile    string // the profile that pins the key, if known
	Pinned     string // SHA256 fingerprints
	Offered    string
	OfferedKey string // the key presented, as an authorized_keys line
}

// Error says what happened and the remedy: confirm the new fingerprint
// with the operator (an agent whose key was rotated, deploy/README.md
// "Rotating the host key"), then pin the key presented, or install again
// checking it.
func (e *HostKeyError) Error() string {
	host, port, _ := net.SplitHostPort(e.Addr)
	profile := e.Profile
	if profile == "" {
		profile = "PROFILE"
	}
	return fmt.Sprintf("the agent at %s presented the host key %s, but the profile pins %s: refusing to connect.\n"+
		"Somebody may be intercepting the connection, or the operator gave the agent a new key (plug agent host-key rotate).\n"+
		"Ask the cluster admin for the agent's fingerprint (its log says it at start: kubectl -n NAMESPACE logs deploy/plug | grep fingerprint).\n"+
		"Only if it is %s, pin the key it presented:\n"+
		"  plug profile add %s --host %s --port %s --host-key '%s' --force\n"+
		"or install again, checking it:\n"+
		"  ssh -p %s get@%s %s -s -- --fingerprint %s %s %s",
		e.Addr, e.Offered, e.Pinned, e.Offered, profile, host, port, e.OfferedKey, port, host, installerPipe(), e.Offered, host, port)
}

// installerPipe is how this system runs the installer: Git Bash on
// Windows runs its own.
func installerPipe() string {
	if runtime.GOOS == "windows" {
		return "install-windows | bash"
	}
	return "install | sh"
}

// AuthError says the agent refused the developer's key.
type AuthError struct {
	Addr        string
	User        string
	Profile     string // the profile whose key was offered, if known
	Fingerprint string // of the key offered, "SHA256:..."
	Reason      string // what the agent said, if anything
}

func (e *AuthError) Error() string {
	profile := e.Profile
	if profile == "" {
		profile = "PROFILE"
	}
	reason := ""
	if e.Reason != "" {
		reason = "\nThe agent says: " + e.Reason
	}
	return fmt.Sprintf("the agent at %s refused the key %s (user %s).%s\n"+
		"Print the public key with `plug pubkey -p %s` and give it to the cluster admin, or deposit it\n"+
		"where your cluster takes keys; with PLUG_ADMISSION: invite, a member must accept it. Then run again.",
		e.Addr, e.Fingerprint, e.User, reason, profile)
}

// EndedError says the agent ended the run: who ended it, and why.
type EndedError struct{ By, Reason string }

func (e *EndedError) Error() string {
	return fmt.Sprintf("the run was ended by %s: %s", e.By, e.Reason)
}

// ServeError says why a name was not served: the agent refused it (Err is
// nil), or the request failed on this side (Err is why, and Reason its
// text). Its text names the name, port and protocol once, as
// "cannot serve NAME:PORT[/udp]: REASON", so a caller adds no such prefix.
type ServeError struct {
	Name   string
	Port   int
	UDP    bool
	Reason string
	Err    error
}

func (e *ServeError) Error() string {
	proto := ""
	if e.UDP {
		proto = "/udp"
	}
	return fmt.Sprintf("cannot serve %s:%d%s: %s", e.Name, e.Port, proto, e.Reason)
}

// Unwrap is the failure on this side, nil for a refusal of the agent.
func (e *ServeError) Unwrap() error { return e.Err }

// DialError says the agent could not reach Address in the cluster, and why.
type DialError struct{ Address, Reason string }

func (e *DialError) Error() string {
	return fmt.Sprintf("cannot reach %s through the agent: %s", e.Address, e.Reason)
}
