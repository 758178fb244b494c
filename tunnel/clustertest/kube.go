package clustertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// KubeUp is the command that starts the test Kubernetes cluster.
const KubeUp = "sudo testdata/cluster/up.sh"

// Kube is the running single-node Kubernetes of testdata/cluster, as seen by
// one test: the cluster's credentials and a namespace of the test's own.
type Kube struct {
	Kubeconfig string // admin kubeconfig file
	Server     string // apiserver URL, https://NODE_IP:6443
	CAFile     string // PEM file of the cluster CA
	CA         []byte // the CA's PEM, read from CAFile
	Token      string // admin bearer token (system:masters)
	KubectlBin string // a kubectl matching the cluster
	NodeIP     string // the node's address: apiserver, kubelet, NodePorts
	NodeName   string

	PlugImage string // plug's own image, empty when it was not built
	// RegistryImage is plug's image index (linux/amd64 and arm64) in the
	// node's registry, by tag (127.0.0.1:5123/plug:dev), empty when up.sh
	// pushed none.
	RegistryImage string
	WorkloadImage string // testdata/workload's image (entrypoint /workload)
	PauseImage    string

	// Namespace was created for this test and is deleted when it ends.
	Namespace string
}

// KubeOption changes what NeedKube prepares.
type KubeOption func(*kubeOptions)

type kubeOptions struct{ restricted bool }

// Restricted labels the test's namespace
// pod-security.kubernetes.io/enforce=restricted, so the apiserver admits
// only pods that meet the restricted Pod Security Standard.
func Restricted() KubeOption { return func(o *kubeOptions) { o.restricted = true } }

// NeedKube returns the test cluster with a fresh namespace, deleted when the
// test ends. When the cluster is not running, the test fails if CI=true and
// is skipped otherwise, naming the command that starts it.
func NeedKube(t testing.TB, opts ...KubeOption) *Kube {
	t.Helper()
	var o kubeOptions
	for _, opt := range opts {
		opt(&o)
	}
	const what = "the test Kubernetes cluster"
	k, err := loadKube(filepath.Join(envDir(), "kube.env"))
	if err != nil {
		missing(t, what, KubeUp, err)
	}
	k.Namespace = namespaceFor(t.Name())
	manifest := "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + k.Namespace + "\n"
	if o.restricted {
		manifest += "  labels:\n    pod-security.kubernetes.io/enforce: restricted\n"
	}
	if _, err := k.run(manifest, "create", "-f", "-"); err != nil {
		missing(t, what, KubeUp, err)
	}
	t.Cleanup(func() {
		if _, err := k.run("", "delete", "namespace", k.Namespace, "--wait=false"); err != nil {
			t.Errorf("deleting the test namespace: %v", err)
		}
	})
	return k
}

// loadKube reads the env file up.sh writes.
func loadKube(path string) (*Kube, error) {
	env, err := readEnv(path)
	if err != nil {
		return nil, err
	}
	for _, key := range []string{"KUBECONFIG", "KUBE_SERVER", "KUBE_CA", "KUBE_TOKEN", "KUBECTL", "NODE_IP"} {
		if env[key] == "" {
			return nil, fmt.Errorf("%s has no %s", path, key)
		}
	}
	ca, err := os.ReadFile(env["KUBE_CA"])
	if err != nil {
		return nil, err
	}
	return &Kube{
		Kubeconfig:    env["KUBECONFIG"],
		Server:        env["KUBE_SERVER"],
		CAFile:        env["KUBE_CA"],
		CA:            ca,
		Token:         env["KUBE_TOKEN"],
		KubectlBin:    env["KUBECTL"],
		NodeIP:        env["NODE_IP"],
		NodeName:      env["NODE_NAME"],
		PlugImage:     plugImage(env),
		RegistryImage: env["PLUG_REGISTRY_IMAGE"],
		WorkloadImage: workloadImage(env),
		PauseImage:    env["PAUSE_IMAGE"],
	}, nil
}

// namespaceFor makes a namespace name from a test name: lower case, only
// letters, digits and dashes, short enough for a label, and unique.
func namespaceFor(testName string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(testName) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
	}
	name := strings.Trim(b.String(), "-")
	if len(name) > 40 {
		name = strings.TrimRight(name[:40], "-")
	}
	suffix := make([]byte, 3)
	rand.Read(suffix)
	return "t-" + name + "-" + hex.EncodeToString(suffix)
}

// Kubectl runs kubectl as the cluster admin in the test's namespace (an -n
// among args wins) and returns its standard output. It fails the test if
// kubectl fails.
func (k *Kube) Kubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := k.run("", args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Apply creates or updates the objects of a YAML manifest in the test's
// namespace, failing the test if kubectl refuses them.
func (k *Kube) Apply(t testing.TB, manifest string) {
	t.Helper()
	if err := k.TryApply(manifest); err != nil {
		t.Fatal(err)
	}
}

// TryApply is Apply for a manifest the cluster may refuse: it returns a
// *KubectlError carrying kubectl's message.
func (k *Kube) TryApply(manifest string) error {
	_, err := k.run(manifest, "apply", "-f", "-")
	return err
}

// TryKubectl is Kubectl for a command that may fail: it returns standard
// output and a *KubectlError carrying standard error.
func (k *Kube) TryKubectl(args ...string) (string, error) { return k.run("", args...) }

// KubectlError is a kubectl command that failed.
type KubectlError struct {
	Args   []string
	Stderr string
	Err    error
}

func (e *KubectlError) Error() string {
	return fmt.Sprintf("kubectl %s: %v: %s", strings.Join(e.Args, " "), e.Err, strings.TrimSpace(e.Stderr))
}

func (e *KubectlError) Unwrap() error { return e.Err }

// kubectlTimeout bounds every kubectl command, so a hung cluster fails a
// test instead of stalling the suite.
const kubectlTimeout = 2 * time.Minute

func (k *Kube) run(stdin string, args ...string) (string, error) {
	full := append([]string{"--kubeconfig", k.Kubeconfig}, args...)
	if k.Namespace != "" {
		full = append([]string{"--namespace", k.Namespace}, full...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.KubectlBin, full...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), &KubectlError{Args: args, Stderr: stderr.String(), Err: errors.Join(err, ctx.Err())}
	}
	return stdout.String(), nil
}

// NeedPlugImage returns plug's image, stopping the test like a missing
// cluster when dist/plug-image.tar was not built before up.sh ran.
func (k *Kube) NeedPlugImage(t testing.TB) string {
	t.Helper()
	return needPlugImage(t, k.PlugImage, "cluster", KubeUp)
}

// ApplyAgentManifest applies deploy/plug-k8s.yaml in the test's namespace
// as an admin would, with image, and with the plug Service as a ClusterIP
// (the NodePort 32222 is the demo's; tests run side by side). uid, when
// set, is pinned the way OpenShift's restricted-v2 assigns one from the
// namespace's range. edits change the text further, as an operator
// editing the manifest would.
func (k *Kube) ApplyAgentManifest(t testing.TB, image string, uid int, edits ...func(string) string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "plug-k8s.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := strings.Replace(string(raw), "image: plug:dev", "image: "+image, 1)
	m = strings.Replace(m, "  type: NodePort\n", "  type: ClusterIP\n", 1)
	m = strings.Replace(m, "      nodePort: 32222\n", "", 1)
	if uid != 0 {
		m = strings.Replace(m, "        runAsNonRoot: true\n        seccompProfile:",
			fmt.Sprintf("        runAsNonRoot: true\n        runAsUser: %d\n        runAsGroup: 0\n        seccompProfile:", uid), 1)
	}
	for _, edit := range edits {
		m = edit(m)
	}
	k.Apply(t, m)
}

// ManifestEnv is an edit for ApplyAgentManifest: it uncomments the
// manifest's example entry of the agent's environment variable name and
// sets it to value (YAML, as it would be written there). It panics when
// the manifest carries no such example: the test and the manifest
// disagree.
func ManifestEnv(name, value string) func(string) string {
	return func(m string) string {
		const indent = "            "
		entry := indent + "# - name: " + name + "\n" + indent + "#   value: "
		i := strings.Index(m, entry)
		if i < 0 {
			panic("deploy/plug-k8s.yaml no longer carries " + name + " commented out")
		}
		end := i + len(entry) + strings.IndexByte(m[i+len(entry):], '\n') + 1
		return m[:i] + indent + "- name: " + name + "\n" + indent + "  value: " + value + "\n" + m[end:]
	}
}

// repoRoot is the checkout's top directory: the nearest parent of the
// test's directory that holds deploy/plug-k8s.yaml.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "deploy", "plug-k8s.yaml")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no deploy/plug-k8s.yaml above the test's directory")
		}
		dir = parent
	}
}
