package kubeplatform

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"plug/k8sapi"
	"plug/tunnel"
)

// MembersSecret is the Secret holding the members of admission by approval
// (tunnel.MemberStore), created by deploy/plug-k8s.yaml.
const MembersSecret = "plug-members"

// membersField is the key of the Secret's data holding the list (JSON
// tunnel.MemberList).
const membersField = "members.json"

var _ tunnel.MemberStore = (*Platform)(nil)

// LoadMembers reads the list from the Secret plug-members.
func (p *Platform) LoadMembers(ctx context.Context) (tunnel.MemberList, error) {
	s, err := p.c.Secrets(p.ns).Get(ctx, MembersSecret)
	if err != nil {
		return tunnel.MemberList{}, membersError(err)
	}
	return decodeMembers(s)
}

// UpdateMembers changes the list in the Secret plug-members, only if
// nobody changed it since it was read (it reads again otherwise).
func (p *Platform) UpdateMembers(ctx context.Context, change func(*tunnel.MemberList) error) (tunnel.MemberList, error) {
	secrets := p.c.Secrets(p.ns)
	for range 8 {
		s, err := secrets.Get(ctx, MembersSecret)
		if err != nil {
			return tunnel.MemberList{}, membersError(err)
		}
		l, err := decodeMembers(s)
		if err != nil {
			return tunnel.MemberList{}, err
		}
		if err := change(&l); err != nil {
			return tunnel.MemberList{}, err
		}
		raw, err := json.Marshal(l)
		if err != nil {
			return tunnel.MemberList{}, err
		}
		_, err = secrets.MergePatch(ctx, MembersSecret, map[string]any{
			"metadata": map[string]any{"resourceVersion": s.Metadata.ResourceVersion},
			"data":     map[string][]byte{membersField: raw},
		})
		if k8sapi.IsConflict(err) {
			continue
		}
		if err != nil {
			return tunnel.MemberList{}, membersError(err)
		}
		return l, nil
	}
	return tunnel.MemberList{}, fmt.Errorf("the Secret %s kept changing while plug changed it; try again", MembersSecret)
}

// WatchMembers follows the Secret plug-members. A deleted Secret reads as
// an empty list: nobody is a member until it is made again.
func (p *Platform) WatchMembers(ctx context.Context, update func(tunnel.MemberList)) error {
	pass := func(s *k8sapi.Secret) {
		l, err := decodeMembers(s)
		if err != nil {
			p.logf("%v", err)
			return
		}
		update(l)
	}
	opts := k8sapi.ListOptions{FieldSelector: "metadata.name=" + MembersSecret}
	err := p.c.Secrets(p.ns).Follow(ctx, opts, 10*time.Second, k8sapi.Handler[k8sapi.Secret]{
		Synced: func(items []k8sapi.Secret) {
			if len(items) == 0 {
				p.logf("the Secret %s does not exist: with admission by approval nobody gets in; apply deploy/plug-k8s.yaml, which creates it", MembersSecret)
				update(tunnel.MemberList{})
				return
			}
			pass(&items[0])
		},
		Changed: func(ev k8sapi.Event[k8sapi.Secret]) {
			if ev.Type == k8sapi.Deleted {
				update(tunnel.MemberList{})
				return
			}
			pass(&ev.Object)
		},
	})
	if ctx.Err() == nil {
		return membersError(err)
	}
	return err
}

// decodeMembers reads the list of the Secret s; a Secret without one holds
// an empty list.
func decodeMembers(s *k8sapi.Secret) (tunnel.MemberList, error) {
	var l tunnel.MemberList
	raw, ok := s.Data[membersField]
	if !ok || len(raw) == 0 {
		return l, nil
	}
	if err := json.Unmarshal(raw, &l); err != nil {
		return l, fmt.Errorf("the Secret %s holds no member list plug can read (%v); reset the members as deploy/README.md says", MembersSecret, err)
	}
	return l, nil
}

// membersError says what to do about a failure to use the Secret.
func membersError(err error) error {
	switch {
	case err == nil:
		return nil
	case k8sapi.IsNotFound(err):
		return fmt.Errorf("the Secret %s does not exist; apply deploy/plug-k8s.yaml, which creates it", MembersSecret)
	case k8sapi.IsForbidden(err):
		return fmt.Errorf("the agent may not use the Secret %s (%w); apply the Role of deploy/plug-k8s.yaml, which grants get, list, watch and patch on it", MembersSecret, err)
	}
	return fmt.Errorf("the Secret %s: %w", MembersSecret, err)
}
