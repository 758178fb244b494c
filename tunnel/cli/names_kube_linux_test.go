package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/k8sapi"
	"plug/k8sapi/kubeplatform"
	"plug/keys"
	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// The acceptance tests on the real cluster: a developer's plug runs, as an
// unprivileged user after plug setup, reach the namespace's Services by
// name, through an agent on the Kubernetes platform.

// kubeRun is the test cluster with an agent of its namespace, and a
// developer's ~/.plug whose profile "kube" reaches it.
type kubeRun struct {
	*clustertest.Kube
	base string // a directory the developer may read
	home string // the developer's PLUG_HOME, theirs
	bin  string // the test binary, which the developer may run as plug
	dev  *user.User
	dial func(ctx context.Context, network, address string) (net.Conn, error) // as the agent does
}

// needKubeRun prepares the machine (plug setup; keepMachine puts back what
// it found when the test ends),
// the cluster's namespace with the sample workload, and an agent on the
// Kubernetes platform in this process.
func needKubeRun(t *testing.T) *kubeRun { return needKubeRunWith(t, nil) }

// needKubeRunWith is needKubeRun whose agent's options agent changes
// first, if not nil: e.g. its client, or the namespaces it offers.
func needKubeRunWith(t *testing.T, agent func(k *kubeRun, o *kubeplatform.Options)) *kubeRun {
	t.Helper()
	k := newKubeRun(t)
	cfg, err := k8sapi.LoadKubeconfig(k.Kubeconfig, "")
	if err != nil {
		t.Fatal(err)
	}
	client, err := k8sapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	opts := kubeplatform.Options{Client: client, Namespace: k.Namespace, PodIP: k.NodeIP}
	if agent != nil {
		agent(k, &opts)
	}
	platform, err := kubeplatform.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	dns := strings.TrimSpace(k.Kubectl(t, "-n", "kube-system", "get", "service", "kube-dns", "-o", "jsonpath={.spec.clusterIP}"))
	agentPlatform := inPod{platform, k.Namespace, dns}
	k.dial = agentPlatform.DialContext
	addr, hostKey, _ := tunneltest.StartAgent(t, agentPlatform)
	k.developer(t, addr, hostKey)

	k.Apply(t, serveManifest("web", k.WorkloadImage, "hello from the cluster", "{name: http, port: 80, targetPort: 8080}", "{name: high, port: 18080, targetPort: 8080}"))
	k.Kubectl(t, "rollout", "status", "deployment/web", "--timeout=90s")
	k.waitService(t, "web:80", true)
	return k
}

// needDeployedKubeRun prepares the machine as needKubeRun does, and the
// manifest's agent deployed in the test's namespace with plug's image,
// the manifest changed by edits as an operator would; the developer's
// profile "kube" reaches the agent pod.
func needDeployedKubeRun(t *testing.T, edits ...func(string) string) *kubeRun {
	t.Helper()
	k := newKubeRun(t)
	k.ApplyAgentManifest(t, k.NeedPlugImage(t), 0, edits...)
	k.Kubectl(t, "rollout", "status", "deployment/plug", "--timeout=120s")
	addr, hostKey := deployedAgent(t, k.Kube)
	k.developer(t, addr, hostKey)
	return k
}

// newKubeRun is the test cluster, the developer's account, and this
// machine prepared with plug setup (keepMachine puts back what it found
// when the test ends).
func newKubeRun(t *testing.T) *kubeRun {
	t.Helper()
	if os.Geteuid() != 0 {
		clustertest.Unavailable(t, "the tests on the cluster run plug setup and switch users: run them as root")
	}
	k := &kubeRun{Kube: clustertest.NeedKube(t), dev: ensureUser(t)}
	keepMachine(t)
	if code, stdout, stderr := runPlug(t, "setup"); code != 0 {
		t.Fatalf("plug setup: exit %d\n%s%s", code, stdout, stderr)
	}
	return k
}

// developer gives the developer a copy of plug and a ~/.plug of their
// own whose profile "kube", with a key of its own, reaches the agent at
// addr presenting hostKey.
func (k *kubeRun) developer(t *testing.T, addr string, hostKey ssh.PublicKey) {
	t.Helper()
	dir, err := os.MkdirTemp("", "plug-kube-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	k.base, k.home, k.bin = dir, filepath.Join(dir, "home"), filepath.Join(dir, "plug")
	copyFile(t, "/proc/self/exe", k.bin)
	store := keys.Open(k.home)
	host, port, _ := net.SplitHostPort(addr)
	portNum, _ := strconv.Atoi(port)
	if err := store.AddProfile(keys.Profile{Name: "kube", Host: host, Port: portNum, HostKey: keys.AuthorizedKey(hostKey)}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := store.GenerateKey("kube", "dev@test", false); err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(k.dev.Uid)
	gid, _ := strconv.Atoi(k.dev.Gid)
	filepath.Walk(k.home, func(path string, _ os.FileInfo, _ error) error { return os.Chown(path, uid, gid) })
}

// waitService waits until the node's kube-proxy handles address: until the
// agent's dial connects, or, without answers, is refused at once.
func (k *kubeRun) waitService(t *testing.T, address string, answers bool) {
	t.Helper()
	clustertest.Eventually(t, 30*time.Second, "kube-proxy handles "+address, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		start := time.Now()
		c, err := k.dial(ctx, "tcp", address)
		cancel()
		switch {
		case err == nil && answers:
			c.Close()
			return nil
		case err == nil:
			c.Close()
			return errors.New("it still answers")
		case !answers && time.Since(start) < 200*time.Millisecond:
			return nil
		}
		return err
	})
}

// dir makes a directory the developer may write.
func (k *kubeRun) dir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp(k.base, "run-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o777)
	return dir
}

// inPod is the Kubernetes platform of an agent that runs in this test
// process rather than in a pod: it dials names as a pod of the namespace
// would, through the cluster's DNS (with a pod's search list: NS.svc.DOMAIN,
// svc.DOMAIN, DOMAIN) and the node's kube-proxy.
type inPod struct {
	*kubeplatform.Platform
	namespace, dns string
}

func (p inPod) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", net.JoinHostPort(p.dns, "53"))
	}}
	host = strings.TrimSuffix(host, ".")
	var addrs []string
	for _, suffix := range []string{"." + p.namespace + ".svc.cluster.local.", ".svc.cluster.local.", ".cluster.local.", "."} {
		if addrs, err = r.LookupHost(ctx, host+suffix); err == nil {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	return d.DialContext(ctx, network, net.JoinHostPort(addrs[0], port))
}

// plug runs plug as the developer, with args, and returns its exit code
// and output.
func (k *kubeRun) plug(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := k.command(args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// startScript starts `plug -p kube -c -- sh -c script` as the developer,
// with plug's stderr in the buffer returned, logged if t fails; the run
// is killed when t ends.
func (k *kubeRun) startScript(t *testing.T, script string) (*exec.Cmd, *tunneltest.Buffer) {
	t.Helper()
	run := k.command("-p", "kube", "-c", "--", "sh", "-c", script)
	stderr := new(tunneltest.Buffer)
	run.Stderr = stderr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		run.Process.Kill()
		if t.Failed() {
			t.Logf("plug:\n%s", stderr.String())
		}
	})
	return run, stderr
}

// command is plug run as the developer.
func (k *kubeRun) command(args ...string) *exec.Cmd {
	cmd := exec.Command("setpriv", append([]string{"--reuid=" + k.dev.Uid, "--regid=" + k.dev.Gid, "--clear-groups", "--", k.bin}, args...)...)
	cmd.Env = []string{"PLUG_TEST_PLUG=1", "PLUG_HOME=" + k.home, "HOME=" + k.dev.HomeDir, "USER=" + devUser,
		"PATH=/usr/local/bin:/usr/bin:/bin", "TMPDIR=/tmp"}
	cmd.Dir = "/"
	return cmd
}

// TestKubeEveryClientEveryForm: curl, a Go program with Go's resolver,
// Python, Node, the JVM and getent reach a Service on port 80 and on a
// high port by all four forms of its name.
func TestKubeEveryClientEveryForm(t *testing.T) {
	k := needKubeRun(t)
	before := fileSum(t, "/etc/hosts")
	ns := k.Namespace
	forms := []string{"web", "web." + ns, "web." + ns + ".svc", "web." + ns + ".svc.cluster.local"}
	for _, port := range []int{80, 18080} {
		code, stdout, stderr := k.plug(t, "-p", "kube", "-c", "--", "sh", "-c", clientsScript(t, k.bin, k.dir(t), port, forms...))
		t.Logf("port %d:\n%s%s", port, stdout, stderr)
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		checkClients(t, stdout, "hello from the cluster", forms...)
	}
	if fileSum(t, "/etc/hosts") != before {
		t.Fatal("the machine's /etc/hosts changed")
	}
}

// TestKubeServicesComeAndGo: a Service created during the run resolves and
// answers by name; once deleted, its name stops resolving. How long each
// took is logged: the Service's watch event, the node's kube-proxy and the
// machine's load decide most of it (the benchmark measures a new name's
// start).
func TestKubeServicesComeAndGo(t *testing.T) {
	k := needKubeRun(t)
	dir := k.dir(t)
	script := `cd ` + dir + ` && touch started
until getent hosts late > /dev/null; do sleep 0.01; done; touch resolved
until curl -sS --max-time 5 http://late/ > answer 2>/dev/null; do sleep 0.02; done; touch reached
while getent hosts late > /dev/null; do sleep 0.02; done; touch gone`
	run, stderr := k.startScript(t, script)
	waitFile(t, filepath.Join(dir, "started"), clustertest.Settle)
	k.Apply(t, "apiVersion: v1\nkind: Service\nmetadata: {name: late}\nspec:\n  selector: {app: web}\n  ports: [{port: 80, targetPort: 8080}]\n")
	created := time.Now()
	waitFile(t, filepath.Join(dir, "resolved"), clustertest.Settle)
	t.Logf("a new Service resolved %s after kubectl apply returned", time.Since(created))
	waitFile(t, filepath.Join(dir, "reached"), clustertest.Settle)
	t.Logf("and answered by name %s after (kube-proxy programs it meanwhile)", time.Since(created))
	k.Kubectl(t, "delete", "service", "late", "--wait=false")
	deleted := time.Now()
	waitFile(t, filepath.Join(dir, "gone"), clustertest.Settle)
	t.Logf("a deleted Service stopped resolving %s after kubectl delete returned", time.Since(deleted))
	run.Wait()
	t.Logf("plug:\n%s", stderr.String())
}

// TestKubeNewServiceInANewRun: a run started right after a Service was
// created resolves it by every form at once: `plug -c -- getent hosts
// NAME` of a Service made a moment ago works. Then, while a run lasts,
// a Service changed to other ports is reached on them (told to the run as
// a change of one name).
func TestKubeNewServiceInANewRun(t *testing.T) {
	k := needKubeRun(t)
	ns := k.Namespace
	k.Apply(t, "apiVersion: v1\nkind: Service\nmetadata: {name: fresh}\nspec:\n  selector: {app: web}\n  ports: [{port: 80, targetPort: 8080}]\n")
	created := time.Now()
	// The first run starts at once after kubectl apply; the agent offers
	// the name once the API server's watch has told it, so a run that
	// started before that is tried again (the API server's pace is not
	// plug's).
	tries := 0
	clustertest.Eventually(t, clustertest.Settle, "a new run resolving fresh by every form", func() error {
		tries++
		code, stdout, stderr := k.plug(t, "-p", "kube", "-c", "--", "getent", "hosts", "fresh", "fresh."+ns, "fresh."+ns+".svc.cluster.local")
		if code != 0 || strings.Count(stdout, "\n127.") != 2 || !strings.HasPrefix(stdout, "127.") {
			return fmt.Errorf("exit %d; want 0 and three lines, one per form of the name:\n%s%s", code, stdout, stderr)
		}
		return nil
	})
	t.Logf("plug -c -- getent hosts fresh resolved every form in run %d, which ended %s after kubectl apply returned", tries, time.Since(created))

	dir := k.dir(t)
	run, _ := k.startScript(t, `cd `+dir+` && touch started
until curl -sS --max-time 5 http://fresh:18081/ > answer 2>/dev/null; do sleep 0.05; done; touch reached`)
	waitFile(t, filepath.Join(dir, "started"), clustertest.Settle)
	k.Apply(t, "apiVersion: v1\nkind: Service\nmetadata: {name: fresh}\nspec:\n  selector: {app: web}\n  ports: [{port: 18081, targetPort: 8080}]\n")
	changed := time.Now()
	waitFile(t, filepath.Join(dir, "reached"), clustertest.Settle)
	t.Logf("the Service's new port answered by name %s after kubectl apply returned", time.Since(changed))
	run.Process.Kill()
	run.Wait()
}

// TestKubeNoEndpointsRefused: a Service without ready endpoints refuses
// CMD's connection within a second.
func TestKubeNoEndpointsRefused(t *testing.T) {
	k := needKubeRun(t)
	k.Apply(t, "apiVersion: v1\nkind: Service\nmetadata: {name: idle}\nspec:\n  selector: {app: nothing}\n  ports: [{port: 80, targetPort: 8080}]\n")
	k.waitService(t, "idle:80", false)
	code, stdout, stderr := k.plug(t, "-p", "kube", "-c", "--", "sh", "-c", `curl -sS --max-time 10 -o /dev/null -w 'took %{time_total}\n' http://idle/; echo curl exit $?`)
	t.Logf("%s%s", stdout, stderr)
	took, err := strconv.ParseFloat(strings.TrimPrefix(lineWith(stdout, "took "), "took "), 64)
	// README: such a connection is "refused at once ... within
	// milliseconds, not after a timeout". waitService saw the node refuse
	// the agent's dial at once first, so a second is all plug's.
	if code != 0 || err != nil || took >= 1 || strings.Contains(stdout, "curl exit 0") {
		t.Fatalf("plug did not refuse the connection within a second, though the node refuses it at once (took %v s, %v)", took, err)
	}
}

// TestKubeKill9ThenRun: plug killed with SIGKILL mid-run, then a normal
// run works; the machine's /etc/hosts was never touched.
func TestKubeKill9ThenRun(t *testing.T) {
	k := needKubeRun(t)
	before := fileSum(t, "/etc/hosts")
	dir := k.dir(t)
	crashed := k.command("-p", "kube", "-c", "--", "sh", "-c", "echo $$ > "+dir+"/pid; exec sleep 60")
	if err := crashed.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(dir, "pid"), clustertest.Settle)
	defer exec.Command("kill", "-9", readText(t, filepath.Join(dir, "pid"))).Run()
	// setpriv executes plug in its own process: the process is plug's.
	crashed.Process.Signal(syscall.SIGKILL)
	crashed.Wait()
	code, stdout, stderr := k.plug(t, "-p", "kube", "-c", "--", "curl", "-sS", "--max-time", "5", "http://web."+k.Namespace+"/")
	if code != 0 || stdout != "hello from the cluster\n" {
		t.Fatalf("the run after kill -9: exit %d\n%s%s", code, stdout, stderr)
	}
	if fileSum(t, "/etc/hosts") != before {
		t.Fatal("the machine's /etc/hosts changed")
	}
}

var _ tunnel.Platform = inPod{}
