package swarmplatform

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"plug/swarmapi"
	"plug/tunnel"
)

// The members of admission by approval (tunnel.MemberStore) are swarm
// configs, one per version of the list: plug-members-SERVICE-N holds
// version N of the list of the agent's service SERVICE (its data, JSON
// tunnel.MemberList; labels plug.dev/store=members, plug.dev/service=SERVICE
// and plug.dev/generation=N), so that two plug stacks on one swarm keep
// lists of their own. A change creates version N+1, which only one
// writer can (a config's name is unique), then removes the older ones; the
// newest is the list. Why configs: every manager's agent reads them through
// the API, the swarm keeps them in its replicated store, and they need no
// volume. The stack file creates none: a config the stack file declared
// would be rewritten by the next docker stack deploy, and a config's data
// never changes, hence one per version. Nothing means an empty list.
const (
	// LabelStore marks plug's member configs: "members".
	LabelStore = "plug.dev/store"
	// LabelGeneration is the version of the list a config holds.
	LabelGeneration = "plug.dev/generation"
	// LabelService names the agent service whose list it is.
	LabelService = "plug.dev/service"
)

// membersService is the name the agent's member list goes by: its
// service's, or "plug" for an agent that is no swarm service.
func (p *Platform) membersService() string {
	if p.opts.ServiceName == "" {
		return "plug"
	}
	return p.opts.ServiceName
}

var _ tunnel.MemberStore = (*Platform)(nil)

// membersVersion is one version of the list.
type membersVersion struct {
	list       tunnel.MemberList
	generation uint64
	configs    []swarmapi.Config // every member config found, the newest too
}

// currentMembers reads the newest version of the list.
func (p *Platform) currentMembers(ctx context.Context) (membersVersion, error) {
	cfgs, err := p.opts.Client.Configs(ctx, map[string][]string{"label": {LabelStore + "=members", LabelService + "=" + p.membersService()}})
	if err != nil {
		return membersVersion{}, fmt.Errorf("reading the members (swarm configs plug-members-%s-N): %w", p.membersService(), err)
	}
	v := membersVersion{configs: cfgs}
	var newest *swarmapi.Config
	for i := range cfgs {
		g, err := strconv.ParseUint(cfgs[i].Spec.Labels[LabelGeneration], 10, 64)
		if err == nil && (newest == nil || g > v.generation) {
			newest, v.generation = &cfgs[i], g
		}
	}
	if newest == nil {
		return v, nil
	}
	if err := json.Unmarshal(newest.Spec.Data, &v.list); err != nil {
		return v, fmt.Errorf("the swarm config %s holds no member list plug can read (%v); reset the members as deploy/SWARM.md says", newest.Spec.Name, err)
	}
	return v, nil
}

// LoadMembers reads the newest version of the list.
func (p *Platform) LoadMembers(ctx context.Context) (tunnel.MemberList, error) {
	v, err := p.currentMembers(ctx)
	return v.list, err
}

// UpdateMembers writes the next version of the list; when another agent
// wrote it first, it reads again and applies change again.
func (p *Platform) UpdateMembers(ctx context.Context, change func(*tunnel.MemberList) error) (tunnel.MemberList, error) {
	for range 8 {
		v, err := p.currentMembers(ctx)
		if err != nil {
			return tunnel.MemberList{}, err
		}
		if err := change(&v.list); err != nil {
			return tunnel.MemberList{}, err
		}
		raw, err := json.Marshal(v.list)
		if err != nil {
			return tunnel.MemberList{}, err
		}
		next := strconv.FormatUint(v.generation+1, 10)
		name := "plug-members-" + p.membersService() + "-" + next
		_, err = p.opts.Client.CreateConfig(ctx, swarmapi.ConfigSpec{
			Name:   name,
			Labels: map[string]string{LabelStore: "members", LabelService: p.membersService(), LabelGeneration: next},
			Data:   raw,
		})
		if swarmapi.IsConflict(err) {
			continue // another agent wrote this version first
		}
		if err != nil {
			return tunnel.MemberList{}, fmt.Errorf("writing the members (swarm config %s): %w", name, err)
		}
		for _, old := range v.configs {
			if err := p.opts.Client.RemoveConfig(ctx, old.ID); err != nil && !swarmapi.IsNotFound(err) {
				p.opts.Logf("removing the old member list %s: %v", old.Spec.Name, err)
			}
		}
		return v.list, nil
	}
	return tunnel.MemberList{}, fmt.Errorf("the members kept changing while plug changed them; try again")
}

// WatchMembers passes on the list at once and after each change of the
// swarm's configs, until ctx ends.
func (p *Platform) WatchMembers(ctx context.Context, update func(tunnel.MemberList)) error {
	changed := make(chan struct{}, 1)
	go p.followConfigs(ctx, time.Now(), changed) // from before the first listing: no change is missed
	seen := ^uint64(0)
	for {
		v, err := p.currentMembers(ctx)
		if err == nil && v.generation != seen {
			seen = v.generation
			update(v.list)
		} else if err != nil && ctx.Err() == nil {
			p.opts.Logf("%v", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-time.After(p.opts.Heartbeat):
		}
	}
}
