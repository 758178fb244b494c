package kubeplatform

import (
	"context"
	"fmt"

	"golang.org/x/crypto/ssh"

	"plug/k8sapi"
	"plug/keys"
	"plug/tunnel"
)

// hostKeyField is the key of the Secret's data holding the host key.
const hostKeyField = "ssh_host_ed25519_key"

var _ tunnel.SharedHostKey = (*Platform)(nil)

// HostKey returns the agent's SSH host key, shared by every replica through
// the Secret plug-state: read from it, or made and stored there by the
// first replica to need it. Replicas racing to store one all end up with
// the one stored first (tunnel.SharedHostKey).
func (p *Platform) HostKey(ctx context.Context) (ssh.Signer, error) {
	secrets := p.c.Secrets(p.ns)
	for range 8 {
		s, err := secrets.Get(ctx, StateSecret)
		if k8sapi.IsNotFound(err) {
			s = nil
		} else if err != nil {
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
			_, err = secrets.Create(ctx, &k8sapi.Secret{
				TypeMeta: k8sapi.TypeMeta{APIVersion: "v1", Kind: "Secret"},
				Metadata: k8sapi.ObjectMeta{Name: StateSecret, Labels: map[string]string{LabelManagedBy: ManagedBy}},
				Type:     "Opaque",
				Data:     map[string][]byte{hostKeyField: keyPEM},
			})
		} else {
			_, err = secrets.MergePatch(ctx, StateSecret, map[string]any{
				"metadata": map[string]any{"resourceVersion": s.Metadata.ResourceVersion},
				"data":     map[string][]byte{hostKeyField: keyPEM},
			})
		}
		if k8sapi.IsConflict(err) || k8sapi.IsAlreadyExists(err) {
			continue // another replica stored one first: use that
		}
		if err != nil {
			return nil, fmt.Errorf("storing the host key in the Secret %s: %w (apply deploy/plug-k8s.yaml, which creates it and grants get and patch on it)", StateSecret, err)
		}
	}
	return nil, fmt.Errorf("the Secret %s kept changing while the host key was being stored; start the agent again", StateSecret)
}
