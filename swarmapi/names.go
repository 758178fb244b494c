package swarmapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	"plug/tunnel"
)

// checkBinding is tunnel.CheckBinding, with a hint for the names of stack
// services, which Swarm spells STACK_SERVICE.
func checkBinding(b tunnel.Binding) error {
	err := tunnel.CheckBinding(b)
	if err != nil && strings.Contains(b.Name, "_") {
		return tunnel.Refused(b.Name, "%v (a stack's service web_api is reached as its alias api)", err)
	}
	return err
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
	return nil, tunnel.Refused(name, "%s is a network alias of several services (%s): plug cannot tell which to take over; serve one of them by its service name", name, strings.Join(names, ", "))
}
