package ui

import (
	"bufio"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/keys"
	"plug/tunnel/clustertest"
)

// buildPlug builds plug's CLI from this checkout into the test's
// directory.
func buildPlug(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "plug")
	cmd := exec.Command("go", "build", "-o", bin, "plug")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building plug: %v\n%s", err, out)
	}
	return bin
}

// webManifest is a Deployment and Service "web" answering "deployed".
func webManifest(image string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: %s
        imagePullPolicy: Never
        args: [serve, -name, deployed, ":8080"]
        readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
`, image)
}

// agentAddr is the agent's Service address (kube-proxy takes the node's
// own connections to a ClusterIP to whichever agent pod runs) and its
// host key, from the Secret plug-state.
func agentAddr(t *testing.T, k *clustertest.Kube) (string, ssh.PublicKey) {
	t.Helper()
	var pem []byte
	clustertest.Eventually(t, clustertest.Settle, "the agent's shared host key", func() error {
		out, err := k.TryKubectl("get", "secret", "plug-state", "-o", "jsonpath={.data.ssh_host_ed25519_key}")
		if err == nil {
			pem, err = base64.StdEncoding.DecodeString(strings.TrimSpace(out))
		}
		if err == nil && len(pem) == 0 {
			err = errors.New("no key yet")
		}
		return err
	})
	signer, err := ssh.ParsePrivateKey(pem)
	if err != nil {
		t.Fatalf("the agent's host key: %v", err)
	}
	ip := strings.TrimSpace(k.Kubectl(t, "get", "service", "plug", "-o", "jsonpath={.spec.clusterIP}"))
	return net.JoinHostPort(ip, "2222"), signer.PublicKey()
}

// developer is a workstation with plug, a profile "kube" for the agent
// and a key pair of its own.
type developer struct {
	t    *testing.T
	plug string
	home string
	name string
	fp   string
	pub  string // as plug pubkey prints it
}

func newDeveloper(t *testing.T, plug, addr string, hostKey ssh.PublicKey, name string) *developer {
	t.Helper()
	home := t.TempDir()
	store := keys.Open(home)
	host, port, _ := net.SplitHostPort(addr)
	portNum, _ := strconv.Atoi(port)
	if err := store.AddProfile(keys.Profile{Name: "kube", Host: host, Port: portNum, HostKey: keys.AuthorizedKey(hostKey), User: name, Platform: "kubernetes"}, false); err != nil {
		t.Fatal(err)
	}
	pub, err := store.GenerateKey("kube", name+"@test", false)
	if err != nil {
		t.Fatal(err)
	}
	return &developer{t: t, plug: plug, home: home, name: name, fp: keys.Fingerprint(pub), pub: keys.AuthorizedKey(pub) + " " + name + "@test"}
}

func (d *developer) command(args ...string) *exec.Cmd {
	cmd := exec.Command(d.plug, args...)
	cmd.Env = append(os.Environ(), "PLUG_HOME="+d.home, "USER="+d.name, "DISPLAY=", "WAYLAND_DISPLAY=")
	return cmd
}

// run runs plug to its end: its exit code and output.
func (d *developer) run(args ...string) (int, string) {
	d.t.Helper()
	out, err := d.command(args...).CombinedOutput()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		d.t.Fatal(err)
	}
	d.t.Logf("%s: plug %s: exit %d\n%s", d.name, strings.Join(args, " "), code, out)
	return code, string(out)
}

// running is plug in the background; it is killed when the test ends.
type running struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  strings.Builder
	done chan struct{}
}

func (r *running) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.Write(p)
}

func (r *running) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.String()
}

func (d *developer) start(args ...string) *running {
	d.t.Helper()
	r := &running{cmd: d.command(args...), done: make(chan struct{})}
	r.cmd.Stdout, r.cmd.Stderr = r, r
	if err := r.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	go func() { r.cmd.Wait(); close(r.done) }()
	d.t.Cleanup(func() { r.cmd.Process.Kill(); <-r.done })
	return r
}

// ended waits within for the run to exit, and returns its code.
func (r *running) ended(t *testing.T, within time.Duration, what string) int {
	t.Helper()
	select {
	case <-r.done:
		return r.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		t.Fatalf("%s: plug still runs after %s:\n%s", what, within, r.output())
		return 0
	}
}

// interrupt stops the run as Ctrl-C does.
func (r *running) interrupt() { r.cmd.Process.Signal(syscall.SIGINT) }

// startUI starts plug ui for d, and returns the page's address with its
// token, as plug ui prints it.
func (d *developer) startUI(t *testing.T) (string, *running) {
	t.Helper()
	cmd := d.command("ui", "-p", "kube", "--no-open")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	r := &running{cmd: cmd, done: make(chan struct{})}
	cmd.Stderr = r
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); <-r.done })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	go func() { cmd.Wait(); close(r.done) }()
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "plug ui: ")
	if err != nil || !ok {
		t.Fatalf("plug ui printed %q (%v): %s", line, err, r.output())
	}
	return url, r
}

// localProcess answers HTTP on loopback with its name: the developer's
// process a run serves.
func localProcess(t *testing.T, name string) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, name) })}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().(*net.TCPAddr).Port
}
