package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"plug/k8sapi"
	"plug/k8sapi/kubeplatform"
	"plug/keys"
	"plug/tunnel/clustertest"
)

// TestKubeOtherNamespaces: the agent, as its ServiceAccount with the
// namespace's rights and PLUG_NAMESPACES naming two other namespaces and
// default, offers a run the Services of those it holds the Role
// plug-names in. A developer's program reaches one by svc.ns and by FQDN,
// and kubernetes.default; the name of the other fails at once, and plug
// says the commands that offer it; run as said, they make it reachable
// within 5 s in the same run. A Service created in an offered namespace
// answers within 2 s, and stops resolving once deleted. (The names that do
// not resolve yet go to this machine's DNS, which may take seconds to say
// so: each lookup the script waits with is cut at 0.5 s.)
func TestKubeOtherNamespaces(t *testing.T) {
	var data, msg string
	k := needKubeRunWith(t, func(k *kubeRun, o *kubeplatform.Options) {
		data, msg = k.Namespace+"-data", k.Namespace+"-msg"
		for _, ns := range []string{data, msg} {
			k.Kubectl(t, "create", "namespace", ns)
			t.Cleanup(func() { k.TryKubectl("delete", "namespace", ns, "--wait=false") })
		}
		k.Kubectl(t, "create", "serviceaccount", "plug")
		k.Kubectl(t, "create", "rolebinding", "plug-admin", "--clusterrole=cluster-admin", "--serviceaccount="+k.Namespace+":plug")
		// The Role of this namespace (kubeplatform.NamespacesRole), in data and in default.
		grant(t, k, data, kubeplatform.NamespacesRole)
		grant(t, k, "default", kubeplatform.NamespacesRole+"-"+k.Namespace)
		token := strings.TrimSpace(k.Kubectl(t, "create", "token", "plug", "--duration=1h"))
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(k.CA)
		client, err := k8sapi.New(k8sapi.Config{Server: k.Server, TLS: &tls.Config{RootCAs: pool}, Token: func() (string, error) { return token, nil }})
		if err != nil {
			t.Fatal(err)
		}
		o.Client, o.Namespaces, o.Logf = client, []string{data, msg, "default"}, t.Logf
	})
	for ns, text := range map[string]string{data: "hello from data", msg: "hello from messaging"} {
		file := filepath.Join(t.TempDir(), "db.yaml")
		if err := os.WriteFile(file, []byte(serveManifest("db", k.WorkloadImage, text, "{port: 80, targetPort: 8080}")), 0o644); err != nil {
			t.Fatal(err)
		}
		k.Kubectl(t, "-n", ns, "apply", "-f", file)
		k.Kubectl(t, "-n", ns, "rollout", "status", "deployment/db", "--timeout=90s")
		k.waitService(t, "db."+ns+":80", true)
	}

	dir := k.dir(t)
	script := fmt.Sprintf(`cd %[1]s
curl -sS --max-time 5 http://db.%[2]s/ > short
curl -sS --max-time 5 http://db.%[2]s.svc.cluster.local/ > fqdn
curl -sk --max-time 5 -o /dev/null -w '%%{http_code}' https://kubernetes.default/ > api
start=$(date +%%s%%N); getent hosts db.%[3]s > /dev/null; echo $? $(( ($(date +%%s%%N) - start) / 1000000 )) > refused
touch started
until timeout 0.5 getent hosts db.%[3]s > /dev/null; do sleep 0.01; done; touch offered
until curl -sS --max-time 5 http://db.%[3]s/ > msg 2>/dev/null; do sleep 0.02; done; touch msgreached
until timeout 0.5 getent hosts late.%[2]s > /dev/null; do sleep 0.01; done; touch resolved
until curl -sS --max-time 5 http://late.%[2]s/ > late 2>/dev/null; do sleep 0.02; done; touch reached
while getent hosts late.%[2]s > /dev/null; do sleep 0.02; done; touch gone`, dir, data, msg)
	run, stderr := k.startScript(t, script)
	waitFile(t, filepath.Join(dir, "started"), 30*time.Second)
	t.Logf("plug so far:\n%s", stderr.String())
	for file, want := range map[string]string{"short": "hello from data", "fqdn": "hello from data"} {
		if got := readText(t, filepath.Join(dir, file)); got != want {
			t.Errorf("db.%s by its %s name answered %q, want %q", data, file, got, want)
		}
	}
	if got := readText(t, filepath.Join(dir, "api")); got != "401" && got != "403" && got != "200" {
		t.Errorf("https://kubernetes.default/ answered HTTP %q, want the API server's answer", got)
	}
	var code, ms int
	fmt.Sscan(readText(t, filepath.Join(dir, "refused")), &code, &ms)
	if code == 0 || ms > 1000 {
		t.Errorf("db.%s, not offered: getent exit %d after %d ms, want a failure at once", msg, code, ms)
	}
	t.Logf("db.%s, not offered, failed to resolve in %d ms", msg, ms)
	cmd := regexp.MustCompile(`kubectl -n ` + msg + ` create role [^\n]*`).FindString(stderr.String())
	if cmd == "" {
		t.Fatalf("plug did not say how to offer namespace %s:\n%s", msg, stderr.String())
	}
	offer := exec.Command("sh", "-c", cmd)
	offer.Env = append(os.Environ(), "KUBECONFIG="+k.Kubeconfig, "PATH="+filepath.Dir(k.KubectlBin)+":"+os.Getenv("PATH"))
	if out, err := offer.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	offered := time.Now()
	waitFile(t, filepath.Join(dir, "offered"), clustertest.Settle)
	t.Logf("db.%s resolved %s after the RoleBinding was applied", msg, time.Since(offered))
	waitFile(t, filepath.Join(dir, "msgreached"), clustertest.Settle)
	if got := readText(t, filepath.Join(dir, "msg")); got != "hello from messaging" {
		t.Errorf("db.%s answered %q", msg, got)
	}

	late := filepath.Join(t.TempDir(), "late.yaml")
	if err := os.WriteFile(late, []byte("apiVersion: v1\nkind: Service\nmetadata: {name: late}\nspec:\n  selector: {app: db}\n  ports: [{port: 80, targetPort: 8080}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	created := time.Now() // before kubectl, which takes a while to return
	k.Kubectl(t, "-n", data, "apply", "-f", late)
	waitFile(t, filepath.Join(dir, "resolved"), clustertest.Settle)
	t.Logf("late.%s resolved %s after kubectl apply started", data, time.Since(created))
	waitFile(t, filepath.Join(dir, "reached"), clustertest.Settle)
	t.Logf("and answered %s after", time.Since(created))
	deleted := time.Now()
	k.Kubectl(t, "-n", data, "delete", "service", "late", "--wait=false")
	waitFile(t, filepath.Join(dir, "gone"), clustertest.Settle)
	t.Logf("late.%s stopped resolving %s after kubectl delete started", data, time.Since(deleted))
	run.Wait()
	t.Logf("plug:\n%s", stderr.String())
}

// grant creates, in namespace ns, the Role offering its Services to the
// agent of the test's namespace and its RoleBinding, both named name,
// deleted when the test ends.
func grant(t *testing.T, k *kubeRun, ns, name string) {
	t.Helper()
	k.Kubectl(t, "-n", ns, "create", "role", name, "--verb=list,watch", "--resource=services")
	k.Kubectl(t, "-n", ns, "create", "rolebinding", name, "--role="+name, "--serviceaccount="+k.Namespace+":plug")
	t.Cleanup(func() {
		k.TryKubectl("-n", ns, "delete", "rolebinding", name)
		k.TryKubectl("-n", ns, "delete", "role", name)
	})
}

// serveManifest is a Deployment and a Service, both called name, whose
// pod answers text on port 8080, and the Service on ports (YAML flow
// mappings such as "{port: 80, targetPort: 8080}").
func serveManifest(name, image, text string, ports ...string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s}
spec:
  replicas: 1
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: %[2]s
        imagePullPolicy: Never
        args: [serve, -name, %[3]q, ":8080"]
        readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: %[1]s}
spec:
  selector: {app: %[1]s}
  ports: [%[4]s]
`, name, image, text, strings.Join(ports, ", "))
}

// TestDeployedAgentReachesTheAPIServerByName: the manifest's agent, with
// PLUG_NAMESPACES=default, before the operator offers default: an
// unprivileged program's kubernetes.default does not resolve, and plug
// says the commands that offer it. Once run, within 5 s and in the same
// run, kubernetes.default and its FQDN reach the API server: TLS checked
// against the cluster's CA end to end (the name is in the API server's
// certificate), GET /version answers; a request without credentials is
// the API server's system:anonymous (not the agent's ServiceAccount, which
// may list the namespace's pods), and one with the developer's own token
// is the developer. plug doctor says the same of default, before and
// after; so does OpenSSH's ssh -W kubernetes.default:443 before, and for
// a namespace not listed, the commands that offer it. Once offered, the
// API server's address stays refused by address, by an ExternalName
// Service resolving there, and on another port.
func TestDeployedAgentReachesTheAPIServerByName(t *testing.T) {
	k := needDeployedKubeRun(t, clustertest.ManifestEnv("PLUG_NAMESPACES", "default"))
	if can := strings.TrimSpace(k.Kubectl(t, "auth", "can-i", "list", "pods", "--as=system:serviceaccount:"+k.Namespace+":plug")); can != "yes" {
		t.Fatalf("the agent's ServiceAccount may list pods: %q, want yes (the manifest's Role)", can)
	}
	k.Kubectl(t, "create", "serviceaccount", "dev")
	k.Apply(t, "apiVersion: v1\nkind: Service\nmetadata: {name: api}\nspec:\n  type: ExternalName\n  externalName: kubernetes.default.svc.cluster.local\n  ports: [{port: 443}]\n")
	dir := k.dir(t)
	for name, data := range map[string][]byte{"ca.crt": k.CA, "token": []byte(strings.TrimSpace(k.Kubectl(t, "create", "token", "dev", "--duration=1h")))} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// OpenSSH's users dial names through the agent themselves: a name of
	// a namespace not listed is refused with the commands that offer it,
	// and kubernetes.default, listed, with the agent's note on default.
	for target, want := range map[string]string{
		"kube-dns.kube-system:53": "kubectl -n kube-system create role plug-names --verb=list,watch --resource=services && kubectl -n kube-system create rolebinding plug-names --role=plug-names --serviceaccount=" + k.Namespace + ":plug",
		"kubernetes.default:443":  "namespace default is not offered by the agent",
	} {
		out := k.sshW(t, target)
		if !strings.Contains(out, "(rule: cluster names)") || !strings.Contains(out, want) {
			t.Errorf("ssh -W %s: %q, want the refusal saying %q", target, out, want)
		}
	}
	script := fmt.Sprintf(`cd %[1]s
start=$(date +%%s%%N); getent hosts kubernetes.default > /dev/null; echo $? $(( ($(date +%%s%%N) - start) / 1000000 )) > refused
touch started
until timeout 0.5 getent hosts kubernetes.default > /dev/null; do sleep 0.01; done; touch offered
api="curl -sS --max-time 5 --cacert ca.crt"
until $api https://kubernetes.default/version > version 2> version.err; do sleep 0.02; done; touch reached
$api https://kubernetes.default.svc.cluster.local/version > fqdn
$api https://kubernetes.default/api/v1/namespaces/%[2]s/pods > anonymous
$api -X POST -H "Authorization: Bearer $(cat token)" -H 'Content-Type: application/json' \
  -d '{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}' \
  https://kubernetes.default/apis/authentication.k8s.io/v1/selfsubjectreviews > whoami`, dir, k.Namespace)
	run, stderr := k.startScript(t, script)
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := k.TryKubectl("logs", "deploy/plug")
			t.Logf("the agent's log:\n%s", logs)
		}
	})
	waitFile(t, filepath.Join(dir, "started"), 30*time.Second)
	var code, ms int
	fmt.Sscan(readText(t, filepath.Join(dir, "refused")), &code, &ms)
	if code == 0 || ms > 1000 {
		t.Errorf("kubernetes.default, default not offered: getent exit %d after %d ms, want a failure at once", code, ms)
	}
	offer := "kubectl -n default create role plug-names --verb=list,watch --resource=services && kubectl -n default create rolebinding plug-names --role=plug-names --serviceaccount=" + k.Namespace + ":plug"
	clustertest.Until(t, clustertest.Settle, "plug to say how to offer namespace default", func() bool { return strings.Contains(stderr.String(), offer) })
	if _, out, errOut := k.plug(t, "doctor", "-p", "kube"); !strings.Contains(out+errOut, "list services in namespace default") || !strings.Contains(out+errOut, offer) {
		t.Errorf("plug doctor does not say that namespace default lacks the right, with the commands:\n%s%s", out, errOut)
	}

	// The operator runs what plug said, under names of this test's own
	// (other tests offer default to their agents too).
	name := kubeplatform.NamespacesRole + "-" + k.Namespace
	cmd := exec.Command("sh", "-c", strings.ReplaceAll(offer, kubeplatform.NamespacesRole, name))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+k.Kubeconfig, "PATH="+filepath.Dir(k.KubectlBin)+":"+os.Getenv("PATH"))
	t.Cleanup(func() { k.TryKubectl("-n", "default", "delete", "rolebinding,role", name) })
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	offered := time.Now()
	waitFile(t, filepath.Join(dir, "offered"), clustertest.Settle)
	t.Logf("kubernetes.default resolved %s after the RoleBinding was applied", time.Since(offered))
	waitFile(t, filepath.Join(dir, "reached"), clustertest.Settle)
	t.Logf("and the API server answered %s after", time.Since(offered))
	if err := run.Wait(); err != nil {
		t.Fatalf("the run: %v", err)
	}
	if _, out, errOut := k.plug(t, "doctor", "-p", "kube"); !strings.Contains(out+errOut, "ok   list, watch services in namespace default") {
		t.Errorf("plug doctor does not say that namespace default is offered:\n%s%s", out, errOut)
	}
	// kubernetes.default alone reaches the API server's address: not the
	// address itself, not another name resolving there, not another port.
	apiIP := strings.TrimSpace(k.Kubectl(t, "-n", "default", "get", "service", "kubernetes", "-o", "jsonpath={.spec.clusterIP}"))
	for target, rule := range map[string]string{
		net.JoinHostPort(apiIP, "443"): "(rule: cluster names)",
		"api:443":                      "(rule: protected)",
		"kubernetes.default:6443":      "(rule: cluster names and their ports)",
	} {
		if out := k.sshW(t, target); !strings.Contains(out, rule) {
			t.Errorf("ssh -W %s: %q, want the refusal %s", target, out, rule)
		}
	}
	want := strings.TrimSpace(k.Kubectl(t, "version", "-o", "json"))
	for _, file := range []string{"version", "fqdn"} {
		var got struct{ GitVersion string }
		if err := json.Unmarshal([]byte(readText(t, filepath.Join(dir, file))), &got); err != nil || got.GitVersion == "" || !strings.Contains(want, `"gitVersion": "`+got.GitVersion+`"`) {
			t.Errorf("GET /version by the %s name: %q (%v), want the API server's version (kubectl version: %s)", file, readText(t, filepath.Join(dir, file)), err, want)
		}
	}
	if got := readText(t, filepath.Join(dir, "anonymous")); !strings.Contains(got, `User \"system:anonymous\" cannot list resource \"pods\"`) {
		t.Errorf("listing the namespace's pods without credentials answered %q, want the API server refusing system:anonymous", got)
	}
	var review struct {
		Status struct{ UserInfo struct{ Username string } }
	}
	if err := json.Unmarshal([]byte(readText(t, filepath.Join(dir, "whoami"))), &review); err != nil || review.Status.UserInfo.Username != "system:serviceaccount:"+k.Namespace+":dev" {
		t.Errorf("the developer's token: %q (%v), want the API server to see system:serviceaccount:%s:dev", readText(t, filepath.Join(dir, "whoami")), err, k.Namespace)
	}
	t.Logf("plug:\n%s", stderr.String())
}

// sshW runs OpenSSH's ssh -W target through the agent of the profile
// "kube", with its key, and returns what it printed.
func (k *kubeRun) sshW(t *testing.T, target string) string {
	t.Helper()
	store := keys.Open(k.home)
	profile, err := store.Profile("kube")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ssh", "-F", "/dev/null", "-p", fmt.Sprint(profile.Port),
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
		"-o", "IdentitiesOnly=yes", "-i", store.KeyPath("kube"), "-W", target, "dev@"+profile.Host)
	cmd.Stdin = strings.NewReader("")
	out, _ := cmd.CombinedOutput()
	return string(out)
}
