package tunneltest

import (
	"context"
	"encoding/json"
	"sync"

	"plug/tunnel"
)

// memberStore is the member list (tunnel.MemberStore) of the agents sharing
// one Platform. It keeps the list as JSON, as a cluster object would, so
// that nobody shares its slices.
type memberStore struct {
	membersMu      sync.Mutex
	membersJSON    []byte
	membersChanged chan struct{} // closed and replaced at each write
}

var _ tunnel.MemberStore = (*Platform)(nil)

// LoadMembers reads the list; see tunnel.MemberStore.
func (p *Platform) LoadMembers(ctx context.Context) (tunnel.MemberList, error) {
	p.membersMu.Lock()
	defer p.membersMu.Unlock()
	return p.decodeMembers(), nil
}

func (p *memberStore) decodeMembers() tunnel.MemberList {
	var l tunnel.MemberList
	if p.membersJSON != nil {
		json.Unmarshal(p.membersJSON, &l)
	}
	return l
}

// UpdateMembers applies change and keeps the result.
func (p *Platform) UpdateMembers(ctx context.Context, change func(*tunnel.MemberList) error) (tunnel.MemberList, error) {
	p.membersMu.Lock()
	defer p.membersMu.Unlock()
	l := p.decodeMembers()
	if err := change(&l); err != nil {
		return tunnel.MemberList{}, err
	}
	p.membersJSON, _ = json.Marshal(l)
	if p.membersChanged != nil {
		close(p.membersChanged)
	}
	p.membersChanged = make(chan struct{})
	return p.decodeMembers(), nil
}

// WatchMembers passes on the list at once and at each change.
func (p *Platform) WatchMembers(ctx context.Context, update func(tunnel.MemberList)) error {
	for {
		p.membersMu.Lock()
		l := p.decodeMembers()
		if p.membersChanged == nil {
			p.membersChanged = make(chan struct{})
		}
		changed := p.membersChanged
		p.membersMu.Unlock()
		update(l)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}
