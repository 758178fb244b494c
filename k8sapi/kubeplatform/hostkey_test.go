package kubeplatform

import (
	"bytes"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"

	"plug/k8sapi"
)

// Replicas asking for the host key at the same moment all end up with the
// one stored first, whether the Secret is missing or exists empty (as
// deploy/plug-k8s.yaml creates it); a replica started later reads it.
func TestReplicasShareOneHostKey(t *testing.T) {
	for _, empty := range []bool{false, true} {
		f := newFakeKube(t)
		if empty {
			f.create(t, k8sapi.KindSecret, `{"metadata": {"name": "plug-state"}, "type": "Opaque"}`)
		}
		keys := make([]ssh.Signer, 3)
		var wg sync.WaitGroup
		for i := range keys {
			p := f.platform(t, "", nil)
			wg.Go(func() {
				var err error
				if keys[i], err = p.HostKey(bg); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		later, err := f.platform(t, "", nil).HostKey(bg)
		if err != nil {
			t.Fatal(err)
		}
		for i, k := range keys {
			if k == nil || !bytes.Equal(k.PublicKey().Marshal(), later.PublicKey().Marshal()) {
				t.Errorf("Secret there empty %v: replica %d has another host key", empty, i)
			}
		}
	}
}
