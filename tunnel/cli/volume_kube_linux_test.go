package cli

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"plug/tunnel/clustertest"
)

// The acceptance tests of --volume on the real cluster: the manifest's
// agent in a namespace of the test's own, the fixture workloads of
// testdata/volume/kube.yaml, plug run as a process of its own, and the
// share reached with smbclient through the run's local port (this kernel
// has no CIFS: the mount command plug prints is asserted instead).

// volumeKube is the test cluster with the manifest's agent, the fixture
// and a ~/.plug whose profile "kube" reaches the agent.
type volumeKube struct {
	*clustertest.Kube
	hostDir string // the PersistentVolume's directory on the node
}

// The uid and gid of the fixture's web workload.
const webUID = "1000650000"

func needVolumeKube(t *testing.T, opts ...clustertest.KubeOption) *volumeKube {
	t.Helper()
	if _, err := exec.LookPath("smbclient"); err != nil {
		clustertest.Unavailable(t, "smbclient is not installed (apt-get install smbclient)")
	}
	k := &volumeKube{Kube: clustertest.NeedKube(t, opts...)}
	k.ApplyAgentManifest(t, k.NeedPlugImage(t), 0)
	k.hostDir = k.newHostDir(t, "data", 1000650000)
	raw, err := os.ReadFile("../../testdata/volume/kube.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := strings.NewReplacer("WORKLOAD_IMAGE", k.WorkloadImage, "NAMESPACE", k.Namespace, "HOSTDIR", k.hostDir).Replace(string(raw))
	k.Apply(t, m)
	t.Cleanup(func() { k.TryKubectl("delete", "pv", k.Namespace+"-data", "--wait=false") })
	k.Kubectl(t, "rollout", "status", "deployment/plug", "--timeout=120s")
	k.Kubectl(t, "rollout", "status", "deployment/web", "--timeout=120s")
	k.profile(t)
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := k.TryKubectl("logs", "deploy/plug", "--tail=40")
			t.Logf("the agent's log:\n%s", logs)
		}
	})
	return k
}

// newHostDir makes a directory for a hostPath PersistentVolume, owned by
// uid (and its gid), mode 0770, removed when the test ends.
func (k *volumeKube) newHostDir(t *testing.T, name string, uid int) string {
	t.Helper()
	dir := filepath.Join("/var/tmp", k.Namespace+"-"+name)
	if err := os.Mkdir(dir, 0o770); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, uid, uid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o770); err != nil {
		t.Fatal(err)
	}
	return dir
}

// profile makes the profile "kube" reach the agent's pod.
func (k *volumeKube) profile(t *testing.T) {
	t.Helper()
	agentProfile(t, k.Kube)
}

// helpers lists the volume helpers' pods and Services in the namespace.
func (k *volumeKube) helpers(t *testing.T) string {
	t.Helper()
	return strings.TrimSpace(k.Kubectl(t, "get", "pods,services", "-l", "plug.dev/volume", "-o", "name"))
}

// awaitNoHelpers waits up to within for every helper to be gone, and
// returns how long that took.
func (k *volumeKube) awaitNoHelpers(t *testing.T, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	clustertest.Eventually(t, within, "the volume helpers are gone", func() error {
		if left := k.helpers(t); left != "" {
			return fmt.Errorf("still there:\n%s", left)
		}
		return nil
	})
	return time.Since(start)
}

// volumeRun is plug run as a process with -v, and what it said.
type volumeRun struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr bytes.Buffer
	lines  chan string
	port   string
	pass   string
	detail string
	mount  string // the mount command printed
}

var (
	volumeLine = regexp.MustCompile(`volume \S+: smb://plug@127\.0\.0\.1:(\d+)/volume \((.*)\)$`)
	mountLine  = regexp.MustCompile(`mount it with: (.*password=([0-9a-f]+).*)$`)
)

// startVolume runs plug -p kube -v spec -- sleep 600 and waits until it
// printed the share and the mount command.
func startVolume(t *testing.T, spec string) *volumeRun {
	t.Helper()
	self, _ := os.Executable()
	r := &volumeRun{lines: make(chan string, 64)}
	r.cmd = exec.Command(self, "-p", "kube", "-v", spec+":"+t.TempDir(), "--", "sleep", "600")
	r.cmd.Env = append(os.Environ(), "PLUG_TEST_PLUG=1")
	pipe, err := r.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.cmd.Process.Kill()
		r.cmd.Wait()
	})
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			r.mu.Lock()
			r.stderr.WriteString(sc.Text() + "\n")
			r.mu.Unlock()
			r.lines <- sc.Text()
		}
		close(r.lines)
	}()
	deadline := time.After(150 * time.Second)
	for r.port == "" || r.mount == "" {
		select {
		case line, ok := <-r.lines:
			if !ok {
				t.Fatalf("plug ended before the volume was ready:\n%s", r.said())
			}
			if m := volumeLine.FindStringSubmatch(line); m != nil {
				r.port, r.detail = m[1], m[2]
			}
			if m := mountLine.FindStringSubmatch(line); m != nil {
				r.mount, r.pass = m[1], m[2]
			}
		case <-deadline:
			t.Fatalf("no volume within 150 s:\n%s", r.said())
		}
	}
	go func() {
		for range r.lines {
		}
	}()
	return r
}

func (r *volumeRun) said() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stderr.String()
}

// smb runs smbclient commands on the run's share, in dir, and returns its
// output and error.
func (r *volumeRun) smb(dir, commands string) (string, error) {
	c := exec.Command("smbclient", "//127.0.0.1/volume", "-p", r.port, "-U", "plug%"+r.pass, "-m", "SMB3", "-c", commands)
	c.Dir = dir
	out, err := c.CombinedOutput()
	return string(out), err
}

// TestVolumePVCRestricted is acceptance items 1, 3 and 4 of --volume: a
// Deployment running as uid 1000650000 with that fsGroup in a namespace
// enforcing Pod Security restricted has its claim served to the laptop;
// what is written there is what the workload reads, as its uid, and back;
// Ctrl-C removes the helper within 5 s, and kill -9 within the grace
// (60 s) and a sweep.
func TestVolumePVCRestricted(t *testing.T) {
	k := needVolumeKube(t, clustertest.Restricted())
	r := startVolume(t, "deploy/web:data")
	if !strings.Contains(r.detail, "as uid "+webUID+" gid "+webUID+" fsGroup "+webUID+" (read in its process") {
		t.Errorf("the volume's detail does not say it is served as the workload's uid, read in its process: %q", r.detail)
	}
	if !strings.HasPrefix(r.mount, "mount -t cifs //127.0.0.1/volume ") || !strings.Contains(r.mount, "port="+r.port+",") {
		t.Errorf("the mount command printed is not Linux's: %q", r.mount)
	}
	spec := k.Kubectl(t, "get", "pod", "-l", "plug.dev/volume", "-o", "jsonpath={.items[0].spec.securityContext.runAsUser} {.items[0].spec.containers[0].securityContext.capabilities.drop} {.items[0].spec.containers[0].securityContext.capabilities.add}")
	if strings.TrimSpace(spec) != webUID+` ["ALL"]` {
		t.Errorf("the helper pod runs as %q, want uid %s with every capability dropped and none added", spec, webUID)
	}

	// Written on the laptop, read in the workload, as its uid.
	dir := t.TempDir()
	want := []byte(fmt.Sprintf("written on the laptop at %s\n", time.Now()))
	os.WriteFile(filepath.Join(dir, "up.txt"), want, 0o644)
	if out, err := r.smb(dir, "put up.txt"); err != nil {
		t.Fatalf("smbclient put: %v\n%s\nplug said:\n%s", err, out, r.said())
	}
	if got := k.Kubectl(t, "exec", "deploy/web", "-c", "app", "--", "cat", "/data/up.txt"); got != string(want) {
		t.Errorf("the workload reads %q, want %q", got, want)
	}
	if st := strings.Fields(k.Kubectl(t, "exec", "deploy/web", "-c", "app", "--", "/workload", "stat", "/data/up.txt")); len(st) != 3 || st[0] != webUID || st[1] != webUID {
		t.Errorf("the file written on the laptop is owned by %v in the workload, want uid and gid %s", st, webUID)
	}

	// Written by the workload, read on the laptop.
	back := "written by the workload\n"
	k.Kubectl(t, "exec", "deploy/web", "-c", "app", "--", "/workload", "write", "/data/down.txt", back)
	if out, err := r.smb(dir, "get down.txt"); err != nil {
		t.Fatalf("smbclient get: %v\n%s\nplug said:\n%s", err, out, r.said())
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "down.txt")); string(got) != back {
		t.Errorf("the laptop reads %q, want %q", got, back)
	}

	// Ctrl-C: the helper is gone within 5 s of plug's exit.
	r.cmd.Process.Signal(syscall.SIGINT)
	r.cmd.Wait()
	took := k.awaitNoHelpers(t, clustertest.Settle)
	t.Logf("Ctrl-C: the helper pod and Service were gone %s after plug exited", took.Round(100*time.Millisecond))
	// The helper's Service is plug's own: the run reaches it through its
	// own port, and is never told it as a name of the cluster.
	if said := r.said(); strings.Contains(said, "by name: plug-vol-") || strings.Contains(said, "new in the cluster: plug-vol-") {
		t.Errorf("the run was told the volume helper's Service as a cluster name:\n%s", said)
	}

	// An emptyDir is refused with the reason, and nothing is created.
	code, _, stderr := runPlug(t, "-p", "kube", "-v", "deploy/web:scratch", "--", "true")
	if code != ExitConnect || !strings.Contains(stderr, "an emptyDir lives and dies with its pod") {
		t.Errorf("an emptyDir: exit %d, want %d with the reason:\n%s", code, ExitConnect, stderr)
	}
	if left := k.helpers(t); left != "" {
		t.Errorf("a refused emptyDir left:\n%s", left)
	}

	// kill -9: the agent removes the helper when the run's grace ends.
	r = startVolume(t, "deploy/web:data")
	r.cmd.Process.Signal(syscall.SIGKILL)
	r.cmd.Wait()
	took = k.awaitNoHelpers(t, 70*time.Second)
	t.Logf("kill -9: the helper pod and Service were gone %s after plug was killed", took.Round(100*time.Millisecond))
}

// TestVolumeConfigMapReadOnly is acceptance item 2: a ConfigMap volume is
// served read-only; a write is refused as write-protected.
func TestVolumeConfigMapReadOnly(t *testing.T) {
	k := needVolumeKube(t, clustertest.Restricted())
	r := startVolume(t, "deploy/web:settings")
	if !strings.Contains(r.detail, "ConfigMap, read-only") || !strings.Contains(r.mount, ",ro") {
		t.Errorf("the ConfigMap is not said to be read-only: %q, %q", r.detail, r.mount)
	}
	dir := t.TempDir()
	if out, err := r.smb(dir, "get app.conf"); err != nil {
		t.Fatalf("smbclient get: %v\n%s\nplug said:\n%s", err, out, r.said())
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "app.conf")); string(got) != "mode=test\n" {
		t.Errorf("app.conf reads %q", got)
	}
	os.WriteFile(filepath.Join(dir, "new.txt"), []byte("x"), 0o644)
	out, err := r.smb(dir, "put new.txt")
	if err == nil || !strings.Contains(out, "NT_STATUS_MEDIA_WRITE_PROTECTED") {
		t.Errorf("a write to the ConfigMap: %v, want NT_STATUS_MEDIA_WRITE_PROTECTED:\n%s", err, out)
	}
	_ = k
}

// setAgentEnv sets setting (NAME=VALUE) on the agent's Deployment, waits
// until only pods with it are left, and points the profile at the new one.
func (k *volumeKube) setAgentEnv(t *testing.T, setting string) {
	t.Helper()
	old := strings.Fields(k.Kubectl(t, "get", "pod", "-l", "app.kubernetes.io/name=plug", "-o", "jsonpath={.items[*].metadata.name}"))
	k.Kubectl(t, "set", "env", "deployment/plug", setting)
	k.Kubectl(t, "rollout", "status", "deployment/plug", "--timeout=120s")
	for _, pod := range old {
		k.TryKubectl("wait", "--for=delete", "pod/"+pod, "--timeout=120s")
	}
	k.profile(t)
}

// With PLUG_OPEN_VOLUMES=read-only on the agent, the claim a workload
// writes is served read-only to a key that is not a member, saying why,
// and a write is refused; with PLUG_OPEN_VOLUMES=off the volume is
// refused naming the switch, and no helper is made.
func TestVolumeNarrowedForKeysNotMembers(t *testing.T) {
	k := needVolumeKube(t, clustertest.Restricted())
	k.setAgentEnv(t, "PLUG_OPEN_VOLUMES=read-only")
	r := startVolume(t, "deploy/web:data")
	if !strings.Contains(r.detail, "read-only") || !strings.Contains(r.detail, "PLUG_OPEN_VOLUMES=read-only") || !strings.Contains(r.mount, ",ro") {
		t.Errorf("the claim is not said to be read-only, and why: %q, %q", r.detail, r.mount)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "new.txt"), []byte("x"), 0o644)
	if out, err := r.smb(dir, "put new.txt"); err == nil || !strings.Contains(out, "NT_STATUS_MEDIA_WRITE_PROTECTED") {
		t.Errorf("a write to the claim served read-only: %v, want NT_STATUS_MEDIA_WRITE_PROTECTED:\n%s", err, out)
	}
	r.cmd.Process.Signal(syscall.SIGINT)
	r.cmd.Wait()
	k.awaitNoHelpers(t, clustertest.Settle)

	k.setAgentEnv(t, "PLUG_OPEN_VOLUMES=off")
	var stderr string
	clustertest.Eventually(t, clustertest.Settle, "the volume refused by the new agent", func() error {
		var code int
		code, _, stderr = runPlug(t, "-p", "kube", "-v", "deploy/web:data", "--", "true")
		if code != ExitConnect || !strings.Contains(stderr, "PLUG_OPEN_VOLUMES=off") {
			return fmt.Errorf("exit %d:\n%s", code, stderr)
		}
		return nil
	})
	if left := k.helpers(t); left != "" {
		t.Errorf("a refused volume left:\n%s", left)
	}
}

// TestVolumeAsOwner is acceptance item 5: a workload that runs as root,
// and one whose uid can be read nowhere, get a helper with SETUID and
// SETGID alone, serving as the owner of the volume's root; a namespace
// enforcing restricted refuses that helper, and plug says why.
func TestVolumeAsOwner(t *testing.T) {
	k := needVolumeKube(t) // no Pod Security enforced: a root workload runs
	owner := k.newHostDir(t, "owned", 4242)
	m := strings.NewReplacer("NAMESPACE", k.Namespace, "HOSTDIR", owner, "WORKLOAD_IMAGE", k.WorkloadImage, "PAUSE_IMAGE", k.PauseImage).Replace(asOwnerFixture)
	k.Apply(t, m)
	t.Cleanup(func() { k.TryKubectl("delete", "pv", k.Namespace+"-owned", "--wait=false") })
	k.Kubectl(t, "rollout", "status", "deployment/root", "--timeout=120s")
	k.Kubectl(t, "rollout", "status", "deployment/nobody", "--timeout=120s")
	for _, c := range []struct{ workload, why string }{
		{"deploy/root:owned", "the workload runs as root (read in its process"},
		{"deploy/nobody:owned", "the workload's uid could be read nowhere"},
	} {
		r := startVolume(t, c.workload)
		if !strings.Contains(r.detail, "as the owner of the volume's root: "+c.why) {
			t.Errorf("%s: the detail does not say why it is served as the owner: %q", c.workload, r.detail)
		}
		caps := k.Kubectl(t, "get", "pod", "-l", "plug.dev/volume", "-o", "jsonpath={.items[0].spec.securityContext.runAsUser} {.items[0].spec.containers[0].securityContext.capabilities.add}")
		if strings.TrimSpace(caps) != `0 ["SETUID","SETGID"]` {
			t.Errorf("%s: the helper runs as %q, want root with SETUID and SETGID alone", c.workload, caps)
		}
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "f.txt"), []byte(c.workload), 0o644)
		if out, err := r.smb(dir, "put f.txt"); err != nil {
			t.Fatalf("%s: smbclient put: %v\n%s", c.workload, err, out)
		}
		st, err := os.Stat(filepath.Join(owner, "f.txt"))
		if err != nil {
			t.Fatal(err)
		}
		if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 4242 || sys.Gid != 4242 {
			t.Errorf("%s: the file is owned by %d:%d, want the volume root's owner 4242:4242", c.workload, sys.Uid, sys.Gid)
		}
		os.Remove(filepath.Join(owner, "f.txt"))
		r.cmd.Process.Signal(syscall.SIGINT)
		r.cmd.Wait()
		k.awaitNoHelpers(t, clustertest.Settle)
	}

	// The same root workload in a restricted namespace: refused, clearly.
	k.Kubectl(t, "label", "namespace", k.Namespace, "pod-security.kubernetes.io/enforce=restricted")
	code, _, stderr := runPlug(t, "-p", "kube", "-v", "deploy/root:owned", "--", "true")
	if code != ExitConnect || !strings.Contains(stderr, "refuses the volume helper: the workload runs as root") ||
		!strings.Contains(stderr, "SETUID and SETGID") || !strings.Contains(stderr, "PodSecurity") {
		t.Errorf("a root workload's helper in a restricted namespace: exit %d, want %d and why:\n%s", code, ExitConnect, stderr)
	}
	if left := k.helpers(t); left != "" {
		t.Errorf("the refused helper left:\n%s", left)
	}
}

// asOwnerFixture is a claim on a directory owned by 4242, and two
// workloads mounting it: root runs as root, nobody runs the pause image
// (no cat, no securityContext: its uid can be read nowhere).
const asOwnerFixture = `
apiVersion: v1
kind: PersistentVolume
metadata:
  name: NAMESPACE-owned
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  claimRef: {namespace: NAMESPACE, name: owned}
  hostPath: {path: HOSTDIR, type: Directory}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: owned
spec:
  accessModes: [ReadWriteMany]
  storageClassName: ""
  volumeName: NAMESPACE-owned
  resources: {requests: {storage: 1Gi}}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: root
spec:
  selector: {matchLabels: {app: root}}
  template:
    metadata: {labels: {app: root}}
    spec:
      terminationGracePeriodSeconds: 1
      securityContext: {runAsUser: 0}
      containers:
        - name: app
          image: WORKLOAD_IMAGE
          imagePullPolicy: IfNotPresent
          args: [serve, ":8080"]
          volumeMounts: [{name: owned, mountPath: /owned}]
      volumes:
        - name: owned
          persistentVolumeClaim: {claimName: owned}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: nobody
spec:
  selector: {matchLabels: {app: nobody}}
  template:
    metadata: {labels: {app: nobody}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
        - name: app
          image: PAUSE_IMAGE
          imagePullPolicy: IfNotPresent
          volumeMounts: [{name: owned, mountPath: /owned}]
      volumes:
        - name: owned
          persistentVolumeClaim: {claimName: owned}
`

// TestVolumeNotifyFromWorkload: a file the workload makes in its pod is
// told to a client watching the volume's share (smbclient's notify,
// through the run's port) within 1 s of the file's making, measured from
// the file's change time on the node (this machine: the same clock).
func TestVolumeNotifyFromWorkload(t *testing.T) {
	k := needVolumeKube(t, clustertest.Restricted())
	r := startVolume(t, "deploy/web:data")
	stdbuf, err := exec.LookPath("stdbuf")
	if err != nil {
		clustertest.Unavailable(t, "stdbuf is not installed (coreutils)")
	}
	type told struct {
		line string
		at   time.Time
	}
	c := exec.Command(stdbuf, "-oL", "smbclient", "//127.0.0.1/volume", "-p", r.port, "-U", "plug%"+r.pass, "-m", "SMB3", "-c", `notify \`)
	out, _ := c.StdoutPipe()
	c.Stderr = c.Stdout
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	lines := make(chan told, 100)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- told{strings.TrimSpace(sc.Text()), time.Now()}
		}
		close(lines)
	}()
	write := func(name string) {
		k.Kubectl(t, "exec", "deploy/web", "-c", "app", "--", "/workload", "write", "/data/"+name, "made in the pod\n")
	}
	// The watch is in place once a file the workload makes is told.
	i := 0
	clustertest.Eventually(t, clustertest.Settle, "a file the workload makes told once the watch is in place", func() error {
		write(fmt.Sprintf("early%d.txt", i))
		i++
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("smbclient's notify ended:\n%s", r.said())
			}
			t.Logf("told: %s", l.line)
			return nil
		case <-time.After(2 * time.Second):
			return fmt.Errorf("nothing told yet")
		}
	})
	write("pod.txt")
	var at time.Time
	deadline := time.After(clustertest.Settle)
	for at.IsZero() {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("smbclient's notify ended")
			}
			if l.line == "0001 pod.txt" {
				at = l.at
			} else if !strings.Contains(l.line, "early") {
				t.Fatalf("told %q while waiting for pod.txt", l.line)
			}
		case <-deadline:
			t.Fatalf("pod.txt, made in the pod, was not told within %v", clustertest.Settle)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(k.hostDir, "pod.txt"), &st); err != nil {
		t.Fatal(err)
	}
	made := time.Unix(st.Ctim.Unix())
	took := at.Sub(made)
	t.Logf("pod.txt was told %v after the workload made it", took.Round(time.Millisecond))
	if took > time.Second {
		t.Errorf("pod.txt was told %v after the workload made it, not within 1 s", took)
	}
}
