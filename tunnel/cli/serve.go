package cli

import (
	"fmt"
	"strconv"
	"strings"

	"plug/keys"
)

// ServeForm is the accepted form of -s, for messages.
const ServeForm = "-s NAME:CLUSTERPORT:LOCALPORT[/udp], or -s PROFILE/NAME:CLUSTERPORT:LOCALPORT[/udp] for one profile of several; e.g. -s web:8080:3000"

// Serve is one -s: the cluster reaches Name:ClusterPort, forwarded to
// localhost:LocalPort, over TCP or, with UDP, over UDP.
type Serve struct {
	Profile     string // the profile it is for; "" means every profile of the run
	Name        string // a DNS-1035 label
	ClusterPort int
	LocalPort   int
	UDP         bool // both ports are UDP ports (a /udp suffix)
}

func (s Serve) String() string {
	name := s.Name
	if s.Profile != "" {
		name = s.Profile + "/" + name
	}
	return fmt.Sprintf("%s:%d:%d", name, s.ClusterPort, s.LocalPort) + s.suffix()
}

// local is the address on this machine the cluster's callers reach.
func (s Serve) local() string { return "127.0.0.1:" + strconv.Itoa(s.LocalPort) }

// suffix is "/udp" for a UDP port, "" for a TCP one.
func (s Serve) suffix() string {
	if s.UDP {
		return "/udp"
	}
	return ""
}

// ServeError says why a -s value is refused.
type ServeError struct {
	Value  string
	Reason string
}

func (e *ServeError) Error() string {
	return fmt.Sprintf("-s %q: %s; the form is %s", e.Value, e.Reason, ServeForm)
}

// ParseServe parses the value of one -s,
// [PROFILE/]NAME:CLUSTERPORT:LOCALPORT[/tcp|/udp]: TCP (/tcp, the default,
// may be said), or with /udp the UDP port CLUSTERPORT of NAME forwarded to
// the UDP port LOCALPORT.
func ParseServe(v string) (Serve, error) {
	bad := func(format string, a ...any) (Serve, error) {
		return Serve{}, &ServeError{Value: v, Reason: fmt.Sprintf(format, a...)}
	}
	var s Serve
	rest, udp := strings.CutSuffix(v, "/udp")
	if !udp {
		rest = strings.TrimSuffix(v, "/tcp")
	}
	s.UDP = udp
	if profile, after, ok := strings.Cut(rest, "/"); ok {
		if err := keys.ValidName(profile); err != nil {
			return bad("%v", err)
		}
		s.Profile, rest = profile, after
	}
	parts := strings.Split(rest, ":")
	if len(parts) != 3 {
		return bad("it has %d part(s) separated by ':', not 3", len(parts))
	}
	s.Name = parts[0]
	if err := checkLabel(s.Name); err != nil {
		return bad("%v", err)
	}
	var err error
	if s.ClusterPort, err = parsePort("CLUSTERPORT", parts[1]); err != nil {
		return bad("%v", err)
	}
	if s.LocalPort, err = parsePort("LOCALPORT", parts[2]); err != nil {
		return bad("%v", err)
	}
	return s, nil
}

// checkLabel accepts a DNS-1035 label, the names a Kubernetes Service may
// have: at most 63 of [a-z0-9-], starting with a letter, not ending in '-'.
func checkLabel(name string) error {
	const form = "a name is at most 63 lowercase letters, digits and '-', starts with a letter and does not end with '-'"
	switch {
	case name == "":
		return fmt.Errorf("NAME is empty (%s)", form)
	case len(name) > 63:
		return fmt.Errorf("NAME %q is %d characters long (%s)", name, len(name), form)
	case name[0] < 'a' || name[0] > 'z':
		return fmt.Errorf("NAME %q does not start with a lowercase letter (%s)", name, form)
	case name[len(name)-1] == '-':
		return fmt.Errorf("NAME %q ends with '-' (%s)", name, form)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return fmt.Errorf("NAME %q contains %q (%s)", name, c, form)
		}
	}
	return nil
}

func parsePort(what, v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || v[0] == '+' || v[0] == '-' {
		return 0, fmt.Errorf("%s %q is not a number", what, v)
	}
	if n < 1 || n > 65535 {
		return 0, fmt.Errorf("%s %d is not between 1 and 65535", what, n)
	}
	return n, nil
}
