package kubeplatform

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"
)

// The Role of deploy/plug-k8s.yaml grants every right; without one, Rights
// says so and its Fix, run as given, grants it back.
func TestRightsOfTheManifestRoleAndTheirFixes(t *testing.T) {
	k := needKube(t)
	p := k.platform(t, "", nil, nil)
	rights, err := p.Rights(bg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rights {
		if !r.Granted {
			t.Errorf("the manifest's Role lacks %q (%s)", r.Rule, r.Feature)
		}
	}

	k.Kubectl(t, "patch", "role", "plug", "--type=json", "-p", `[{"op":"replace","path":"/rules/0/verbs","value":["get","list","watch","create","delete"]}]`)
	rights, err = p.Rights(bg)
	if err != nil {
		t.Fatal(err)
	}
	var fix string
	for _, r := range rights {
		if r.Rule == "patch services" {
			if r.Granted || !r.Required {
				t.Fatalf("patch services: %+v, want required and missing", r)
			}
			fix = r.Fix
		} else if !r.Granted {
			t.Errorf("%q reported missing", r.Rule)
		}
	}
	// Run the fix the way an admin would, from a shell, with kubectl on PATH.
	cmd := exec.Command("sh", "-c", fix)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+k.Kubeconfig, "PATH="+filepath.Dir(k.KubectlBin)+":"+os.Getenv("PATH"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v: %s", fix, err, out.String())
	}
	rights, _ = p.Rights(bg)
	for _, r := range rights {
		if !r.Granted {
			t.Errorf("after the fix, %q is still missing", r.Rule)
		}
	}
}

// Replicas starting together end up with one host key, kept in plug-state.
func TestHostKeyIsSharedByReplicas(t *testing.T) {
	k := needKube(t)
	keys := make([]string, 4)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() {
			signer, err := k.platform(t, "", nil, nil).HostKey(bg)
			if err != nil {
				t.Error(err)
				return
			}
			keys[i] = ssh.FingerprintSHA256(signer.PublicKey())
		})
	}
	wg.Wait()
	for _, key := range keys[1:] {
		if key != keys[0] {
			t.Fatalf("replicas got different host keys: %v", keys)
		}
	}
	again, err := k.platform(t, "", nil, nil).HostKey(bg)
	if err != nil || ssh.FingerprintSHA256(again.PublicKey()) != keys[0] {
		t.Fatalf("a later agent got %v (%v), want %s", again, err, keys[0])
	}
	if !strings.HasPrefix(keys[0], "SHA256:") {
		t.Fatalf("fingerprint %q", keys[0])
	}
}
