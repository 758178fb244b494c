package cluster

import (
	"fmt"
	"strings"
	"testing"

	"plug/tunnel/clustertest"
)

// uid is an arbitrary uid of the kind OpenShift assigns (restricted-v2).
const uid = 1000650000

// TestRestrictedPodRunsAsArbitraryUID proves a pod meeting the restricted
// Pod Security Standard runs in a namespace that enforces it: non-root with
// an arbitrary uid, no capabilities, a read-only root filesystem and the
// runtime's default seccomp profile, as plug's agent and SMB helper run.
// A pod that does not meet it is refused, so the label is enforced.
func TestRestrictedPodRunsAsArbitraryUID(t *testing.T) {
	k := clustertest.NeedKube(t, clustertest.Restricted())
	k.Apply(t, fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: restricted}
spec:
  terminationGracePeriodSeconds: 1
  securityContext:
    runAsNonRoot: true
    runAsUser: %d
    runAsGroup: %d
    fsGroup: %d
    seccompProfile: {type: RuntimeDefault}
  containers:
  - name: main
    image: %s
    imagePullPolicy: Never
    args: [serve, ":8080"]
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities: {drop: [ALL]}
`, uid, uid, uid, k.WorkloadImage))
	waitReady(t, k, "restricted")

	got, err := get(k, "restricted", 1, "http://127.0.0.1:8080/whoami")
	if err != nil {
		t.Fatal(err)
	}
	who := strings.Join(got, "\n")
	for _, want := range []string{
		fmt.Sprintf("uid=%d", uid),
		fmt.Sprintf("gid=%d", uid),
		"capeff=0000000000000000",
	} {
		if !strings.Contains(who, want) {
			t.Errorf("the pod runs as %q, want %s", who, want)
		}
	}

	err = k.TryApply(workloadPod(k, "plain", "plain", "pause"))
	if err == nil {
		t.Fatal("a pod without a security context was admitted to the restricted namespace")
	} else if !strings.Contains(err.Error(), "violates PodSecurity") {
		t.Fatalf("the plain pod was refused, but not by PodSecurity: %v", err)
	}
}
