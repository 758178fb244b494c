package kubeplatform

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"

	"plug/k8sapi"
	"plug/k8sapi/k8sapitest"
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

// Without the rules on plug-state, or with the Secret gone (the Role may
// not create Secrets), the agent starts with a key of its own pod and says
// so with WARNING lines naming the cause and the one command that fixes
// it; each pod then has another key.
func TestHostKeyOfThePodAloneSaysWhy(t *testing.T) {
	cases := []struct {
		name   string
		fault  k8sapitest.Fault
		secret bool
		want   []string
	}{
		{"no get", k8sapitest.Fault{Match: k8sapitest.On("get", "secrets", StateSecret), Code: 403}, true,
			[]string{"lacks the right get secrets/plug-state", `kubectl -n shop patch role plug --type=json -p '[{"op":"add","path":"/rules/-","value":{"apiGroups":[""],"resourceNames":["plug-state"],"resources":["secrets"],"verbs":["get"]}}]' && kubectl -n shop rollout restart deployment/plug`}},
		{"no patch", k8sapitest.Fault{Match: k8sapitest.On("patch", "secrets", StateSecret), Code: 403}, true,
			[]string{"lacks the right patch secrets/plug-state", `"verbs":["patch"]`}},
		{"Secret gone", k8sapitest.Fault{Match: k8sapitest.On("create", "secrets", ""), Code: 403}, false,
			[]string{"the Secret plug-state is missing, and the agent may not create Secrets", "kubectl -n shop create secret generic plug-state && kubectl -n shop rollout restart deployment/plug"}},
	}
	for _, c := range cases {
		f := newFakeKube(t)
		if c.secret {
			f.create(t, k8sapi.KindSecret, `{"metadata": {"name": "plug-state"}, "type": "Opaque"}`)
		}
		f.Inject(c.fault)
		var logged []string
		var mu sync.Mutex
		pod := func(name string) ssh.Signer {
			p := f.platform(t, name, func(o *Options) {
				o.Logf = func(format string, args ...any) {
					mu.Lock()
					defer mu.Unlock()
					logged = append(logged, fmt.Sprintf(format, args...))
				}
			})
			k, err := p.HostKey(bg)
			if err != nil {
				t.Fatalf("%s: HostKey: %v", c.name, err)
			}
			return k
		}
		a, b := pod("plug-a"), pod("plug-b")
		if bytes.Equal(a.PublicKey().Marshal(), b.PublicKey().Marshal()) {
			t.Errorf("%s: two pods share a key that is kept nowhere", c.name)
		}
		log := strings.Join(logged, "\n")
		want := append([]string{"WARNING: the host key is not shared", "WARNING: this pod presents a host key of its own, " + ssh.FingerprintSHA256(a.PublicKey())}, c.want...)
		for _, w := range want {
			if !strings.Contains(log, w) {
				t.Errorf("%s: the log lacks %q:\n%s", c.name, w, log)
			}
		}
	}
}

// RotateHostKey replaces the stored key: the next agent presents the new
// one; without the Secret it changes nothing and names the command that
// makes it.
func TestRotateHostKey(t *testing.T) {
	f := newFakeKube(t)
	p := f.platform(t, "plug-a", nil)
	first, err := p.HostKey(bg)
	if err != nil {
		t.Fatal(err)
	}
	before, after, err := p.RotateHostKey(bg)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before.Marshal(), first.PublicKey().Marshal()) || bytes.Equal(after.Marshal(), before.Marshal()) {
		t.Errorf("rotate: before %s after %s, the agent had %s", ssh.FingerprintSHA256(before), ssh.FingerprintSHA256(after), ssh.FingerprintSHA256(first.PublicKey()))
	}
	next, err := f.platform(t, "plug-b", nil).HostKey(bg)
	if err != nil || !bytes.Equal(next.PublicKey().Marshal(), after.Marshal()) {
		t.Errorf("the next agent presents %v (%v), want the rotated key %s", next, err, ssh.FingerprintSHA256(after))
	}
	if err := f.admin.Secrets(fakeNS).Delete(bg, StateSecret, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.RotateHostKey(bg); err == nil || !strings.Contains(err.Error(), "kubectl -n shop create secret generic plug-state") {
		t.Errorf("rotate without the Secret: %v", err)
	}
	if f.exists(t, k8sapi.KindSecret, StateSecret) {
		t.Error("rotate without the Secret made one")
	}
}
