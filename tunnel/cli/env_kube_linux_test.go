package cli

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/keys"
	"plug/tunnel/clustertest"
)

// The acceptance tests of --env-from on the real cluster: the manifest's
// agent, deployed with its Role, reads the fixture workload of
// testdata/env/kube.yaml, and CMD's environment is compared, key by key,
// with what `kubectl exec … env` prints in the running container.

// envKube is the test cluster with the manifest's agent in the test's
// namespace, the fixture deployed after it, and a ~/.plug whose profile
// "kube" reaches the agent.
type envKube struct {
	*clustertest.Kube
	dir string
}

func needEnvKube(t *testing.T) *envKube {
	t.Helper()
	k := &envKube{Kube: clustertest.NeedKube(t), dir: t.TempDir()}
	image := k.NeedPlugImage(t)
	k.ApplyAgentManifest(t, image, 0)
	k.Kubectl(t, "rollout", "status", "deployment/plug", "--timeout=120s")

	raw, err := os.ReadFile("../../testdata/env/kube.yaml")
	if err != nil {
		t.Fatal(err)
	}
	k.Apply(t, strings.ReplaceAll(string(raw), "WORKLOAD_IMAGE", k.WorkloadImage))
	k.Kubectl(t, "rollout", "status", "deployment/web", "--timeout=120s")
	if _, err := k.TryKubectl("exec", "deploy/web", "-c", "app", "--", "env"); err != nil {
		clustertest.Unavailable(t, fmt.Sprintf("the workload image %s has no env command (%v): testdata/cluster/up.sh loads the current one, or set PLUG_TEST_WORKLOAD_IMAGE", k.WorkloadImage, err))
	}

	agentProfile(t, k.Kube)
	return k
}

// agentProfile makes the profile "kube", with a key of its own, reach the
// agent pod that k's manifest deployed, and waits until the agent answers.
func agentProfile(t *testing.T, k *clustertest.Kube) {
	t.Helper()
	addr, hostKey := deployedAgent(t, k)
	host, _, _ := net.SplitHostPort(addr)
	agentProfileAt(t, host, hostKey)
}

// agentProfileAt makes the profile "kube", with a key of its own, reach
// the agent with hostKey at host, port 2222.
func agentProfileAt(t *testing.T, host string, hostKey ssh.PublicKey) {
	t.Helper()
	store := useHome(t)
	if err := store.AddProfile(keys.Profile{Name: "kube", Host: host, Port: 2222, HostKey: keys.AuthorizedKey(hostKey)}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := store.GenerateKey("kube", "dev@test", false); err != nil {
		t.Fatal(err)
	}
}

// deployedAgent is the address and host key of the agent pod that k's
// manifest deployed, once it answers there.
func deployedAgent(t *testing.T, k *clustertest.Kube) (addr string, hostKey ssh.PublicKey) {
	t.Helper()
	pem, err := base64.StdEncoding.DecodeString(k.Kubectl(t, "get", "secret", "plug-state", "-o", "jsonpath={.data.ssh_host_ed25519_key}"))
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(pem)
	if err != nil {
		t.Fatalf("the agent's host key: %v", err)
	}
	ip := strings.TrimSpace(k.Kubectl(t, "get", "pod", "-l", "app.kubernetes.io/name=plug", "-o", "jsonpath={.items[0].status.podIP}"))
	addr = net.JoinHostPort(ip, "2222")
	eventuallyDial(t, addr)
	return addr, signer.PublicKey()
}

// eventuallyDial waits until address accepts connections.
func eventuallyDial(t *testing.T, address string) {
	t.Helper()
	clustertest.Eventually(t, 60*time.Second, "the agent at "+address+" to answer", func() error {
		c, err := net.DialTimeout("tcp", address, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
}

// execEnv is the environment `kubectl exec … env -0` prints in container
// of the workload.
func (k *envKube) execEnv(t *testing.T, workload, container string) map[string]string {
	t.Helper()
	out := k.Kubectl(t, "exec", workload, "-c", container, "--", "env", "-0")
	env := map[string]string{}
	for _, kv := range strings.Split(out, "\x00") {
		if name, value, ok := strings.Cut(kv, "="); ok {
			env[name] = value
		}
	}
	return env
}

// cmdEnv runs plug with args and CMD (the test binary writing its
// environment) and returns that environment, plug's exit code and stderr.
func (k *envKube) cmdEnv(t *testing.T, args ...string) (map[string]string, int, string) {
	t.Helper()
	out := filepath.Join(k.dir, fmt.Sprintf("cmd-%d.json", time.Now().UnixNano()))
	args = append(args, "--env", "PLUG_TEST_ENV_OUT="+out, "--", os.Args[0])
	code, _, stderr := runPlug(t, append([]string{"-p", "kube"}, args...)...)
	raw, err := os.ReadFile(out)
	if errors.Is(err, os.ErrNotExist) {
		return nil, code, stderr
	}
	var env map[string]string
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatal(err)
	}
	delete(env, "PLUG_TEST_ENV_OUT")
	return env, code, stderr
}

// withoutKept is env without the variables this machine keeps.
func withoutKept(env map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range env {
		if !(keepRules{keep: laptopVars}).keeps(k) {
			out[k] = v
		}
	}
	return out
}

// compare reports every variable in which got and want differ.
func compare(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	var diffs []string
	for k := range union(got, want) {
		g, gok := got[k]
		w, wok := want[k]
		switch {
		case !gok:
			diffs = append(diffs, fmt.Sprintf("%s: missing (the container has %q)", k, w))
		case !wok:
			diffs = append(diffs, fmt.Sprintf("%s=%q: the container has no such variable", k, g))
		case g != w:
			diffs = append(diffs, fmt.Sprintf("%s=%q, the container has %q", k, g, w))
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		t.Errorf("%s differs from the container's environment in %d variables:\n%s", what, len(diffs), strings.Join(diffs, "\n"))
	}
}

// Acceptance 1 and 2: CMD's environment is the container's, key by key
// but for the laptop's own variables: $(VAR) chains and escapes, envFrom
// with prefixes, optional sources and keys that are missing, Secrets, the
// downward API, resources, service links and the image's ENV. The dotenv
// file, read by python-dotenv, and the JSON file hold the same, mode 0600.
func TestKubeEnvFromIsTheContainersEnvironment(t *testing.T) {
	k := needEnvKube(t)
	dotenvFile, jsonFile := filepath.Join(k.dir, "web.env"), filepath.Join(k.dir, "web.json")
	got, code, stderr := k.cmdEnv(t, "--env-from", "deploy/web", "--env-file", dotenvFile, "--env-json", jsonFile)
	if code != 0 || got == nil {
		t.Fatalf("exit %d, CMD ran: %v:\n%s", code, got != nil, stderr)
	}
	t.Logf("plug said:\n%s", stderr)
	want := withoutKept(k.execEnv(t, "deploy/web", "app"))
	compare(t, "CMD's environment", withoutKept(got), want)

	// The agent's audit trail names the Secret and the keys read, never a
	// value (deploy/README.md, the audit trail's env.read).
	clustertest.Eventually(t, clustertest.Settle, "the env.read line in the agent's log", func() error {
		logs, err := k.TryKubectl("logs", "deploy/plug")
		if err != nil {
			return err
		}
		for _, line := range strings.Split(logs, "\n") {
			if strings.Contains(line, `"event":"env.read"`) && strings.Contains(line, `"workload":"deployment/web: pod `) &&
				regexp.MustCompile(`\{"kind":"Secret","name":"app-secrets","keys":\[[^\]]*"DB_PASSWORD"`).MatchString(line) {
				if strings.Contains(line, "s3cr3t") {
					t.Errorf("the audit line holds a value: %s", line)
				}
				return nil
			}
		}
		return fmt.Errorf("no env.read line naming the Secret app-secrets and its key DB_PASSWORD in:\n%s", logs)
	})
	for name, v := range got {
		if (keepRules{keep: laptopVars}).keeps(name) && os.Getenv(name) != v {
			t.Errorf("%s=%q is kept from this machine, which has %q", name, v, os.Getenv(name))
		}
	}

	// What the comparison rests on: every form is in the container.
	for name, value := range map[string]string{
		"CHAIN_2": "plain-value/debug/admin/on", "FORWARD": "$(DEFINED_LATER)", "UNDEFINED_REF": "x-$(NO_SUCH_VAR)-y",
		"ESCAPED": "$(PLAIN) $plain-value $ $ $( $x", "MODE": "env-wins-over-from-extra-config", "CFG_MODE": "from-extra-config",
		"DB_PASSWORD": "s3cr3t p@ss ' \" $", "DB_USER": "admin", "GREETING": "hello, world", "POD_NAMESPACE": k.Namespace,
		"CPU_REQUEST_MILLI": "250", "CPU_LIMIT": "2", "MEMORY_REQUEST_MI": "64", "MEMORY_LIMIT": "134217728",
		"EPHEMERAL_LIMIT_MI": "1024", "SIDECAR_MEMORY_MI": "32", "WORKLOAD_IMAGE_ENV": "baked-into-the-image",
		"POD_OWNER": "ops@example.com", "SERVICE_ACCOUNT": "default",
	} {
		if want[name] != value {
			t.Errorf("the container's %s = %q, want %q", name, want[name], value)
		}
	}
	for _, name := range []string{"OPTIONAL_KEY", "OPTIONAL_CONFIGMAP", "OPTIONAL_SECRET_KEY", "SIDECAR_ONLY", "HEADLESS_SERVICE_HOST"} {
		if _, ok := want[name]; ok {
			t.Errorf("the container has %s", name)
		}
	}
	for _, name := range []string{"POD_NAME", "POD_UID", "POD_TEMPLATE_HASH", "NODE_NAME", "POD_IP", "HOST_IP", "DB_SERVICE_HOST", "CACHE_STORE_PORT_53_UDP_PROTO", "PLUG_SERVICE_HOST", "KUBERNETES_SERVICE_HOST", "KUBERNETES_PORT_443_TCP"} {
		if want[name] == "" {
			t.Errorf("the container has no %s", name)
		}
	}
	if strings.Contains(stderr, "left out") || strings.Contains(stderr, "note:") {
		t.Errorf("with every right, nothing is left out:\n%s", stderr)
	}
	for _, secret := range []string{"s3cr3t", "hunter2", "tok-123"} {
		if strings.Contains(stderr, secret) {
			t.Errorf("stderr holds a Secret's value:\n%s", stderr)
		}
	}

	files := withoutKept(got)
	var inJSON map[string]string
	raw, _ := os.ReadFile(jsonFile)
	if err := json.Unmarshal(raw, &inJSON); err != nil {
		t.Fatalf("%s: %v", jsonFile, err)
	}
	files["PLUG_TEST_ENV_OUT"] = inJSON["PLUG_TEST_ENV_OUT"]
	compare(t, jsonFile, inJSON, files)
	if parsed, ok := pythonDotenv(t, dotenvFile); ok {
		compare(t, dotenvFile+" read by python-dotenv", parsed, files)
	}
	for _, f := range []string{dotenvFile, jsonFile} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v, want 0600", f, err, fi.Mode())
		}
	}

	// The default container is the first; another is named after ':'.
	side, code, stderr := k.cmdEnv(t, "--env-from", "deployment/web:sidecar")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	compare(t, "the sidecar's environment", withoutKept(side), withoutKept(k.execEnv(t, "deploy/web", "sidecar")))
	pod := strings.TrimSpace(k.Kubectl(t, "get", "pod", "-l", "app=web", "-o", "jsonpath={.items[0].metadata.name}"))
	byPod, code, stderr := k.cmdEnv(t, "--env-from", "pod/"+pod)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	compare(t, "pod/"+pod, withoutKept(byPod), want)
}

// Acceptance 3: without the right to read Secrets, the variables that
// need it are left out, named with the rule, and CMD runs (exit 0)
// without them, and without any of their values.
func TestKubeEnvFromWithoutTheSecretsRight(t *testing.T) {
	k := needEnvKube(t)
	var role struct {
		Rules []struct {
			Resources     []string `json:"resources"`
			ResourceNames []string `json:"resourceNames"`
		} `json:"rules"`
	}
	json.Unmarshal([]byte(k.Kubectl(t, "get", "role", "plug", "-o", "json")), &role)
	index := -1
	for i, r := range role.Rules {
		if reflect.DeepEqual(r.Resources, []string{"secrets"}) && len(r.ResourceNames) == 0 {
			index = i
		}
	}
	if index < 0 {
		t.Fatal("the manifest's Role has no rule for reading Secrets")
	}
	k.Kubectl(t, "patch", "role", "plug", "--type=json", "-p", fmt.Sprintf(`[{"op":"remove","path":"/rules/%d"}]`, index))

	got, code, stderr := k.cmdEnv(t, "--env-from", "deploy/web")
	if code != 0 || got == nil {
		t.Fatalf("exit %d, CMD ran: %v:\n%s", code, got != nil, stderr)
	}
	t.Logf("plug said:\n%s", stderr)
	line := lineWith(stderr, `plug: left out, as the agent lacks the right "get secrets" (plug doctor -p kube prints the command that grants it): `)
	for _, item := range []string{`DB_PASSWORD (Secret "app-secrets", key "DB_PASSWORD")`, "DSN (refers to $(DB_USER)", `CHAIN_2 (refers to $(DB_USER), which Secret "creds" (envFrom) may hold)`, `every variable of Secret "creds" (envFrom, prefix DB_)`} {
		if !strings.Contains(line, item) {
			t.Errorf("the left-out line lacks %q:\n%s", item, stderr)
		}
	}
	container := k.execEnv(t, "deploy/web", "app")
	for _, name := range []string{"DB_PASSWORD", "DSN", "CHAIN_2", "DB_USER"} {
		if _, ok := got[name]; ok {
			t.Errorf("CMD has %s", name)
		}
	}
	for name, v := range got {
		for _, secret := range []string{"s3cr3t", "hunter2", "tok-123"} {
			if strings.Contains(v, secret) {
				t.Errorf("CMD's %s holds a Secret's value", name)
			}
		}
		if !(keepRules{keep: laptopVars}).keeps(name) && container[name] != v {
			t.Errorf("CMD's %s=%q, the container has %q", name, v, container[name])
		}
	}
	code, doctorOut, _ := runPlug(t, "doctor", "-p", "kube")
	if !strings.Contains(doctorOut, "warn missing right get secrets: that feature is off (--env-from: a workload's environment") ||
		!strings.Contains(doctorOut, `"resources":["secrets"],"verbs":["get"]`) {
		t.Errorf("plug doctor (exit %d) does not name the rule and its grant:\n%s", code, doctorOut)
	}
	if !strings.Contains(stderr, "plug: note: the image's own ENV") {
		t.Errorf("stderr does not say the image's ENV is not included:\n%s", stderr)
	}
	for _, secret := range []string{"s3cr3t", "hunter2", "tok-123"} {
		if strings.Contains(stderr, secret) {
			t.Errorf("stderr holds a Secret's value:\n%s", stderr)
		}
	}
}

// Acceptance 4: a workload that does not exist, a container it does not
// have, and a workload of another namespace: each a clear error, exit 3,
// CMD not started, no file written.
func TestKubeEnvFromRefusals(t *testing.T) {
	k := needEnvKube(t)
	other := k.Namespace + "-other"
	k.Kubectl(t, "create", "namespace", other)
	t.Cleanup(func() { k.TryKubectl("delete", "namespace", other, "--wait=false") })
	k.Kubectl(t, "-n", other, "create", "deployment", "elsewhere", "--image="+k.WorkloadImage, "--", "/workload", "pause")

	for _, tc := range []struct{ from, want string }{
		{"deploy/nope", "deployment/nope does not exist in namespace " + k.Namespace + ", the agent's"},
		{"statefulset/web", "statefulset/web does not exist in namespace " + k.Namespace},
		{"deploy/web:nope", `deployment/web has no container "nope"; its containers: app, sidecar`},
		{"pod/nope", "pod/nope does not exist in namespace " + k.Namespace},
		{"deploy/elsewhere", "plug reads the workloads of the agent's own namespace only"},
		{"service/web", "a Kubernetes Service has no environment"},
	} {
		file := filepath.Join(k.dir, "refused.env")
		env, code, stderr := k.cmdEnv(t, "--env-from", tc.from, "--env-file", file)
		if code != ExitConnect || env != nil || !strings.Contains(stderr, "plug: cannot read the environment of ") || !strings.Contains(stderr, tc.want) {
			t.Errorf("--env-from %s: exit %d, CMD ran: %v, want exit %d and %q:\n%s", tc.from, code, env != nil, ExitConnect, tc.want, stderr)
		}
		if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("--env-from %s wrote %s", tc.from, file)
		}
	}
}
