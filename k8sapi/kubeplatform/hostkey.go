package kubeplatform

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/crypto/ssh"

	"plug/k8sapi"
	"plug/keys"
	"plug/tunnel"
)

// hostKeyField is the key of the Secret's data holding the host key.
const hostKeyField = "ssh_host_ed25519_key"

var _ tunnel.SharedHostKey = (*Platform)(nil)

// unshared says why the host key cannot be kept in the Secret plug-state,
// and the one command that lets it be.
type unshared struct {
	why, fix string
}

func (u *unshared) Error() string { return u.why }

// HostKey returns the agent's SSH host key, shared by every replica through
// the Secret plug-state: read from it, or made and stored there by the
// first replica to need it. Replicas racing to store one all end up with
// the one stored first (tunnel.SharedHostKey).
//
// When the agent may not read or patch the Secret (its Role lacks the
// rule), or the Secret is gone and it may not create it (deploy/plug-k8s.yaml
// grants no create on Secrets), HostKey returns a key of this pod alone,
// made now and kept nowhere, and logs, each line starting with WARNING,
// why, its fingerprint, and the one command that makes the key shared again.
func (p *Platform) HostKey(ctx context.Context) (ssh.Signer, error) {
	signer, err := p.sharedHostKey(ctx)
	var u *unshared
	if !errors.As(err, &u) {
		return signer, err
	}
	keyPEM, _, err := keys.NewPrivateKey("plug agent host key of pod " + p.pod)
	if err != nil {
		return nil, err
	}
	if signer, err = ssh.ParsePrivateKey(keyPEM); err != nil {
		return nil, err
	}
	if p.logf != nil {
		p.logf("WARNING: the host key is not shared: %s", u.why)
		p.logf("WARNING: this pod presents a host key of its own, %s, until it stops: developers whose profile pins another key are refused, and each restart or other replica presents yet another one", keys.Fingerprint(signer.PublicKey()))
		p.logf("WARNING: to share one host key again: %s", u.fix)
	}
	return signer, nil
}

// sharedHostKey is the host key kept in plug-state, made and stored there
// when it holds none; an *unshared error when the agent may not.
func (p *Platform) sharedHostKey(ctx context.Context) (ssh.Signer, error) {
	secrets := p.c.Secrets(p.ns)
	for range 8 {
		s, err := secrets.Get(ctx, StateSecret)
		switch {
		case k8sapi.IsNotFound(err):
			s = nil
		case k8sapi.IsForbidden(err):
			return nil, p.stateRuleMissing("get")
		case err != nil:
			return nil, fmt.Errorf("reading the host key from the Secret %s: %w", StateSecret, err)
		}
		if s != nil && len(s.Data[hostKeyField]) > 0 {
			signer, err := ssh.ParsePrivateKey(s.Data[hostKeyField])
			if err != nil {
				return nil, fmt.Errorf("the host key in the Secret %s is unreadable (%v); delete its %s entry to have a new one made", StateSecret, err, hostKeyField)
			}
			return signer, nil
		}
		keyPEM, _, err := keys.NewPrivateKey("plug agent host key")
		if err != nil {
			return nil, err
		}
		if s == nil {
			_, err = secrets.Create(ctx, stateSecret(keyPEM))
			if k8sapi.IsForbidden(err) {
				return nil, &unshared{
					why: fmt.Sprintf("the Secret %s is missing, and the agent may not create Secrets (deploy/plug-k8s.yaml creates it; a Role may not narrow create to one name)", StateSecret),
					fix: p.recreateStateCommand(),
				}
			}
		} else {
			_, err = secrets.MergePatch(ctx, StateSecret, map[string]any{
				"metadata": map[string]any{"resourceVersion": s.Metadata.ResourceVersion},
				"data":     map[string][]byte{hostKeyField: keyPEM},
			})
			if k8sapi.IsForbidden(err) {
				return nil, p.stateRuleMissing("patch")
			}
		}
		if k8sapi.IsConflict(err) || k8sapi.IsAlreadyExists(err) {
			continue // another replica stored one first: use that
		}
		if err != nil {
			return nil, fmt.Errorf("storing the host key in the Secret %s: %w", StateSecret, err)
		}
	}
	return nil, fmt.Errorf("the Secret %s kept changing while the host key was being stored; start the agent again", StateSecret)
}

// stateSecret is plug-state as deploy/plug-k8s.yaml makes it, holding keyPEM.
func stateSecret(keyPEM []byte) *k8sapi.Secret {
	return &k8sapi.Secret{
		TypeMeta: k8sapi.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		Metadata: k8sapi.ObjectMeta{Name: StateSecret, Labels: map[string]string{LabelManagedBy: ManagedBy}},
		Type:     "Opaque",
		Data:     map[string][]byte{hostKeyField: keyPEM},
	}
}

// stateRuleMissing is the unshared host key of a Role without verb on
// plug-state.
func (p *Platform) stateRuleMissing(verb string) *unshared {
	rl := rule{resource: "secrets", name: StateSecret}
	return &unshared{
		why: fmt.Sprintf("the agent lacks the right %s", rl.text(verb)),
		fix: rl.fix(p.ns, verb) + " && " + p.restartCommand(),
	}
}

// recreateStateCommand is the one command that makes plug-state again,
// empty, and restarts the agents so that the first stores its key there.
func (p *Platform) recreateStateCommand() string {
	return fmt.Sprintf("kubectl -n %s create secret generic %s && %s", p.ns, StateSecret, p.restartCommand())
}

// restartCommand restarts the agent's pods, each reading the host key anew.
func (p *Platform) restartCommand() string {
	deployment := p.deployment
	if deployment == "" {
		deployment = "plug"
	}
	return fmt.Sprintf("kubectl -n %s rollout restart deployment/%s", p.ns, deployment)
}

// RotateHostKey replaces the host key in plug-state with a new one and
// returns both; the agents present the new one from their next start
// (RestartHint says how). It changes nothing when the Secret is missing
// or changed meanwhile, saying so.
func (p *Platform) RotateHostKey(ctx context.Context) (before, after ssh.PublicKey, err error) {
	secrets := p.c.Secrets(p.ns)
	s, err := secrets.Get(ctx, StateSecret)
	if k8sapi.IsNotFound(err) {
		return nil, nil, fmt.Errorf("the Secret %s is missing; make it with: %s", StateSecret, p.recreateStateCommand())
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading the Secret %s: %w", StateSecret, err)
	}
	if old, err := ssh.ParsePrivateKey(s.Data[hostKeyField]); err == nil {
		before = old.PublicKey()
	}
	keyPEM, pub, err := keys.NewPrivateKey("plug agent host key")
	if err != nil {
		return nil, nil, err
	}
	_, err = secrets.MergePatch(ctx, StateSecret, map[string]any{
		"metadata": map[string]any{"resourceVersion": s.Metadata.ResourceVersion},
		"data":     map[string][]byte{hostKeyField: keyPEM},
	})
	if k8sapi.IsConflict(err) {
		return nil, nil, fmt.Errorf("the Secret %s changed while the key was being replaced; nothing was changed: run it again", StateSecret)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("storing the new host key in the Secret %s: %w; nothing was changed", StateSecret, err)
	}
	return before, pub, nil
}

// RestartHint is the command that makes every agent present the host key
// RotateHostKey stored.
func (p *Platform) RestartHint() string { return p.restartCommand() }
