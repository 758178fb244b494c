package swarmapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"plug/tunnel"
)

var dns1035 = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)

// RefusedError is a request to serve a name that plug refuses before
// changing anything. Text says why, and what to do instead.
type RefusedError struct {
	Name string
	Text string
}

func (e *RefusedError) Error() string { return e.Text }

func refused(name, format string, args ...any) error {
	return &RefusedError{Name: name, Text: fmt.Sprintf(format, args...)}
}

// checkBinding refuses what cannot be served, before anything changes.
func checkBinding(b tunnel.Binding) error {
	if len(b.Name) > 63 || !dns1035.MatchString(b.Name) {
		return refused(b.Name, "%q cannot be served: a name is lowercase letters, digits and '-', starts with a letter, ends with a letter or digit, at most 63 characters (a stack's service web_api is reached as its alias api)", b.Name)
	}
	if b.Port < 1 || b.Port > 65535 {
		return refused(b.Name, "%s:%d: the cluster port is out of range; give a port from 1 to 65535 (e.g. -s %s:8080:3000)", b.Name, b.Port, b.Name)
	}
	if b.Target < 1 || b.Target > 65535 {
		return refused(b.Name, "%s:%d: the agent's port %d for it is out of range (1 to 65535)", b.Name, b.Port, b.Target)
	}
	if b.Holder.Run == "" {
		return refused(b.Name, "%s: the run holding it has no id", b.Name)
	}
	return nil
}

// takeoverRelayName is the relay service's name when the served name
// belongs to a deployed service: "plug-NAME", shortened with a hash when
// that exceeds the 63 characters a service name may have.
func takeoverRelayName(name string) string {
	n := "plug-" + name
	if len(n) <= 63 {
		return n
	}
	sum := sha256.Sum256([]byte(name))
	return n[:54] + "-" + hex.EncodeToString(sum[:4])
}

// relayFor returns plug's relay serving name, or nil.
func (p *Platform) relayFor(ctx context.Context, name string) (*Service, error) {
	relays, err := p.cfg.Client.Services(ctx, map[string][]string{"label": {labelRelay + "=" + name}})
	if err != nil || len(relays) == 0 {
		return nil, err
	}
	return &relays[0], nil
}

// deployed returns the service callers reach as name: the service of that
// name, else the one service with that network alias (a stack's service
// web_api answers to api on the stack's network). nil when there is none.
func (p *Platform) deployed(ctx context.Context, name string) (*Service, error) {
	all, err := p.cfg.Client.Services(ctx, nil)
	if err != nil {
		return nil, err
	}
	var byAlias []*Service
	for i := range all {
		s := &all[i]
		if s.Spec.Name == name {
			return s, nil
		}
		for _, n := range s.Spec.NetworkAttachments() {
			if slices.Contains(n.Aliases, name) {
				byAlias = append(byAlias, s)
				break
			}
		}
	}
	switch len(byAlias) {
	case 0:
		return nil, nil
	case 1:
		return byAlias[0], nil
	}
	names := make([]string, len(byAlias))
	for i, s := range byAlias {
		names[i] = s.Spec.Name
	}
	return nil, refused(name, "%s is a network alias of several services (%s): plug cannot tell which to take over; serve one of them by its service name", name, strings.Join(names, ", "))
}
