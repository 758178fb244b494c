package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"plug/tunnel/clustertest"
)

// waitReady waits until every named pod of the test's namespace is Ready.
func waitReady(t *testing.T, k *clustertest.Kube, pods ...string) {
	t.Helper()
	args := []string{"wait", "--for=condition=Ready", "--timeout=90s"}
	for _, p := range pods {
		args = append(args, "pod/"+p)
	}
	k.Kubectl(t, args...)
}

// workloadPod is a pod running `workload ARGS...` of the test image.
func workloadPod(k *clustertest.Kube, name, app string, args ...string) string {
	return fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata:
  name: %s
  labels: {app: %s}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: %s
    imagePullPolicy: Never
    args: [%s]
---
`, name, app, k.WorkloadImage, yamlList(args))
}

// yamlList writes strings as the items of a YAML flow sequence.
func yamlList(items []string) string {
	quoted := make([]string, len(items))
	for i, s := range items {
		quoted[i] = strconv.Quote(s)
	}
	return strings.Join(quoted, ", ")
}

// get runs `workload get -n N URL` in pod and returns the bodies it printed.
func get(k *clustertest.Kube, pod string, n int, url string) ([]string, error) {
	out, err := k.TryKubectl("exec", pod, "--", "/workload", "get", "-n", fmt.Sprint(n), "-timeout", "3s", url)
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimSuffix(out, "\n"), "\n"), nil
}

// count returns how many of lines equal want.
func count(lines []string, want string) int {
	n := 0
	for _, l := range lines {
		if l == want {
			n++
		}
	}
	return n
}

// apiClient is an HTTP client that trusts the cluster's CA.
func apiClient(t *testing.T, k *clustertest.Kube) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(k.CA) {
		t.Fatalf("%s holds no PEM certificate", k.CAFile)
	}
	return &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
}
