package cluster

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"plug/tunnel/clustertest"
)

// TestRoleTokenIsRefusedAVerbTheRoleLacks proves what the agent's self-check
// of its rights relies on: a ServiceAccount token bound to a namespaced Role
// may do what the Role grants, and gets 403 Forbidden for a verb it lacks,
// and in any other namespace.
func TestRoleTokenIsRefusedAVerbTheRoleLacks(t *testing.T) {
	k := clustertest.NeedKube(t)
	k.Apply(t, `
apiVersion: v1
kind: ServiceAccount
metadata: {name: reader}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: configmap-reader}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: configmap-reader}
subjects:
- {kind: ServiceAccount, name: reader}
`)
	token := strings.TrimSpace(k.Kubectl(t, "create", "token", "reader", "--duration=10m"))
	client := apiClient(t, k)
	call := func(method, path, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, k.Server+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	configmaps := "/api/v1/namespaces/" + k.Namespace + "/configmaps"
	clustertest.Eventually(t, clustertest.Settle, "the Role grants list", func() error {
		if code, body := call("GET", configmaps, ""); code != http.StatusOK {
			return fmt.Errorf("GET %s: %d %s", configmaps, code, body)
		}
		return nil
	})
	for _, c := range []struct{ method, path, body string }{
		{"POST", configmaps, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}`},
		{"DELETE", configmaps + "/kube-root-ca.crt", ""},
		{"GET", "/api/v1/namespaces/default/configmaps", ""},
		{"GET", "/api/v1/namespaces/" + k.Namespace + "/secrets", ""},
	} {
		code, body := call(c.method, c.path, c.body)
		if code != http.StatusForbidden || !strings.Contains(body, `"reason":"Forbidden"`) {
			t.Errorf("%s %s with the Role's token: %d %s, want 403 Forbidden", c.method, c.path, code, body)
		}
	}
}
