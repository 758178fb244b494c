package swarmplatform

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/swarmapi"
	"plug/tunnel"
	"plug/tunnel/clustertest"
)

// testSwarm is the local swarm of testdata/swarm, as one test uses it.
type testSwarm struct {
	c          *swarmapi.Client
	docker     string // the CLI matching the engine, for what plug itself never does (exec)
	prefix     string // what the test names its services with; they go when it ends
	network    NetworkRef
	node       string
	gateway    string // the host's address on docker_gwbridge, which tasks reach
	workload   string // plug-test/workload:1
	relayImage string
}

// needSwarm returns the local swarm, or stops the test as
// clustertest.NeedSwarm does.
func needSwarm(t *testing.T) *testSwarm {
	t.Helper()
	cs := clustertest.NeedSwarm(t)
	ctx := context.Background()
	s := &testSwarm{c: swarmapi.NewClient(cs.Socket), docker: cs.DockerBin, prefix: cs.Prefix, workload: cs.WorkloadImage}
	nw, err := s.c.Network(ctx, cs.Network)
	if err != nil {
		t.Fatalf("the swarm's network %s: %v", cs.Network, err)
	}
	s.network = NetworkRef{ID: nw.ID, Name: nw.Name}
	info, err := s.c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.node = info.Swarm.NodeID
	if s.gateway, err = hostAddress("docker_gwbridge"); err != nil {
		t.Fatalf("the host's address on docker_gwbridge: %v", err)
	}
	s.relayImage = relayImage(t, s)
	return s
}

// name is a service name of the test's own: prefix-what.
func (s *testSwarm) name(what string) string { return s.prefix + "-" + what }

// hostAddress is the host's IPv4 address on the interface named dev.
func hostAddress(dev string) (string, error) {
	ifc, err := net.InterfaceByName(dev)
	if err != nil {
		return "", err
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil {
			return ip.IP.String(), nil
		}
	}
	return "", fmt.Errorf("%s has no IPv4 address", dev)
}

var relayImageOnce struct {
	sync.Once
	name string
	err  error
}

// relayImage builds, once per test run, an image like plug's whose /plug
// runs the relay code of this tree, and loads it into the swarm.
func relayImage(t *testing.T, s *testSwarm) string {
	relayImageOnce.Do(func() {
		const name = "plug-test/swarmapi-relay:dev"
		root, err := os.MkdirTemp("", "swarmapi-relay")
		if err != nil {
			relayImageOnce.err = err
			return
		}
		defer os.RemoveAll(root)
		rootfs := filepath.Join(root, "rootfs")
		tar := filepath.Join(root, "image.tar")
		build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(rootfs, "plug"), "./testdata/plugrelay")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		steps := []*exec.Cmd{
			build,
			exec.Command("../../build.sh", "mkimage", rootfs, tar, name),
			exec.Command(s.docker, "load", "-q", "-i", tar),
		}
		for _, cmd := range steps {
			if out, err := cmd.CombinedOutput(); err != nil {
				relayImageOnce.err = fmt.Errorf("%v: %v\n%s", cmd.Args, err, out)
				return
			}
		}
		relayImageOnce.name = name
	})
	if relayImageOnce.err != nil {
		t.Fatalf("building the relay image: %v", relayImageOnce.err)
	}
	return relayImageOnce.name
}

// platform is an agent's platform run by the test process: relays dial the
// test's listeners on the host's docker_gwbridge address. task is the
// agent's task ID, "" for none.
func (s *testSwarm) platform(t *testing.T, task string) *Platform {
	return newPlatform(t, Options{
		Client: s.c, Task: task, Node: s.node, Image: s.relayImage,
		Address: s.gateway, Networks: []NetworkRef{s.network},
		Logf: func(format string, args ...any) { t.Logf("platform: "+format, args...) },
	})
}

func holder(run string) tunnel.Holder {
	return tunnel.Holder{Run: run, Agent: "test-agent", Developer: "SHA256:test", User: "dev", Since: time.Now()}
}

// serveLocal answers GET / with body on the host's docker_gwbridge address,
// standing in for the developer's process behind the agent; it returns the
// port.
func (s *testSwarm) serveLocal(t *testing.T, body string) int {
	ln, err := net.Listen("tcp", net.JoinHostPort(s.gateway, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, body)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// createService creates spec's service, whose name must start with the
// test's prefix so that it goes when the test ends, and waits until it runs
// want tasks.
func (s *testSwarm) createService(t *testing.T, spec swarmapi.ServiceSpec, want int) string {
	t.Helper()
	id, err := s.c.CreateService(context.Background(), spec)
	if err != nil {
		t.Fatalf("creating %s: %v", spec.Name, err)
	}
	s.waitTasks(t, id, want)
	return id
}

// workloadSpec is a service of the test workload on the swarm network.
func (s *testSwarm) workloadSpec(name string, args ...string) swarmapi.ServiceSpec {
	return swarmapi.ServiceSpec{
		Name:   name,
		Labels: map[string]string{"plug-test": "swarmapi"},
		TaskTemplate: swarmapi.TaskSpec{
			ContainerSpec: &swarmapi.ContainerSpec{Image: s.workload, Args: args},
			Networks:      []swarmapi.NetworkAttachmentConfig{{Target: s.network.ID}},
		},
		EndpointSpec: &swarmapi.EndpointSpec{Mode: "dnsrr"},
	}
}

func replicated(n uint64) swarmapi.ServiceMode {
	return swarmapi.ServiceMode{Replicated: &swarmapi.ReplicatedService{Replicas: &n}}
}

// waitTasks waits until service id runs exactly want tasks.
func (s *testSwarm) waitTasks(t *testing.T, id string, want int) {
	t.Helper()
	clustertest.Eventually(t, 60*time.Second, fmt.Sprintf("%d tasks of %s", want, id), func() error {
		n, err := s.running(id)
		if err == nil && n != want {
			err = fmt.Errorf("service %s runs %d tasks, want %d", id, n, want)
		}
		return err
	})
}

func (s *testSwarm) running(id string) (int, error) {
	tasks, err := s.c.Tasks(context.Background(), map[string][]string{"service": {id}})
	n := 0
	for _, t := range tasks {
		if t.Status.State == "running" {
			n++
		}
	}
	return n, err
}

// caller runs a workload task on the swarm network that tests call from,
// and returns its container.
func (s *testSwarm) caller(t *testing.T) string {
	t.Helper()
	spec := s.workloadSpec(s.name("caller"), "pause")
	spec.Mode = replicated(1)
	id := s.createService(t, spec, 1)
	tasks, err := s.c.Tasks(context.Background(), map[string][]string{"service": {id}, "desired-state": {"running"}})
	if err != nil || len(tasks) == 0 || tasks[0].Status.ContainerStatus == nil {
		t.Fatalf("the caller's container: %v", err)
	}
	return tasks[0].Status.ContainerStatus.ContainerID
}

// get makes n requests to url, each on a new connection, from container,
// and returns the bodies.
func (s *testSwarm) get(container, url string, n int) ([]string, error) {
	out, err := exec.Command(s.docker, "exec", container, "/workload", "get", "-n", strconv.Itoa(n), "-timeout", "3s", url).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("get %s from the caller: %v: %s", url, err, out)
	}
	return strings.Fields(string(out)), nil
}

// answers waits until all of n new connections from container to url are
// answered by want.
func (s *testSwarm) answers(t *testing.T, container, url, want string, n int) {
	t.Helper()
	clustertest.Eventually(t, 30*time.Second, url+" answered by "+want, func() error {
		got, err := s.get(container, url, n)
		if err == nil && strings.Join(got, " ") != strings.TrimSpace(strings.Repeat(want+" ", n)) {
			err = fmt.Errorf("%s answered %v, want %d times %s", url, got, n, want)
		}
		return err
	})
}

// unreachable waits until url cannot be reached from container.
func (s *testSwarm) unreachable(t *testing.T, container, url string) {
	t.Helper()
	clustertest.Eventually(t, 30*time.Second, url+" unreachable", func() error {
		if got, err := s.get(container, url, 1); err == nil {
			return fmt.Errorf("%s still answers %v", url, got)
		}
		return nil
	})
}

// rawSpec returns service id's spec as the engine sends it.
func (s *testSwarm) rawSpec(t *testing.T, id string) (swarmapi.RawSpec, *swarmapi.Service) {
	t.Helper()
	svc, err := s.c.Service(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := svc.RawSpec()
	if err != nil {
		t.Fatal(err)
	}
	return spec, svc
}

// sameSpec fails t unless service id's spec equals want.
func (s *testSwarm) sameSpec(t *testing.T, id string, want swarmapi.RawSpec) {
	t.Helper()
	got, _ := s.rawSpec(t, id)
	if !reflect.DeepEqual(got, want) {
		a, _ := json.MarshalIndent(want, "", " ")
		b, _ := json.MarshalIndent(got, "", " ")
		t.Fatalf("the spec is not the original:\nwant %s\ngot  %s", a, b)
	}
}

// noRelay fails t if a relay for name is left.
func (s *testSwarm) noRelay(t *testing.T, name string) {
	t.Helper()
	relays, err := s.c.Services(context.Background(), map[string][]string{"label": {labelRelay + "=" + name}})
	if err != nil || len(relays) > 0 {
		t.Fatalf("relays left for %s: %d (%v)", name, len(relays), err)
	}
}

// removeRelays removes what a failed test leaves of name's relays: a
// takeover's relay is named plug-NAME, outside the test's prefix.
func (s *testSwarm) removeRelays(t *testing.T, name string) {
	t.Cleanup(func() {
		relays, _ := s.c.Services(context.Background(), map[string][]string{"label": {labelRelay + "=" + name}})
		for _, r := range relays {
			s.c.RemoveService(context.Background(), r.ID)
		}
	})
}

// newSigner returns a new key, as a developer's plug makes one.
func newSigner() ssh.Signer {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	k, _ := ssh.NewSignerFromKey(priv)
	return k
}

// connectRun opens a run that serves names with the agent at addr, as a
// new key, trying for a minute: after the agent's update, its new task
// answers once it has started.
func connectRun(t *testing.T, addr string, hostKey ssh.PublicKey) *tunnel.Session {
	t.Helper()
	signer := newSigner()
	var sess *tunnel.Session
	clustertest.Eventually(t, time.Minute, "a session with the agent", func() (err error) {
		sess, err = tunnel.Connect(context.Background(), tunnel.ClientConfig{Addr: addr, User: "dev", Signer: signer, HostKey: hostKey,
			Run: tunnel.RunInfo{Serves: true}, Events: func(e tunnel.Event) { t.Logf("run: %s: %s", e.Kind, e.Text) }})
		return err
	})
	t.Cleanup(func() { sess.Close() })
	return sess
}
