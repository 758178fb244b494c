package cli

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/keys"
	"plug/tunnel"
	"plug/tunnel/tunneltest"
)

// cluster is an in-process agent on the in-memory platform, reached by a
// profile of the test's ~/.plug.
type cluster struct {
	platform *tunneltest.Platform
	profile  string
}

// useHome gives the test a ~/.plug of its own.
func useHome(t *testing.T) keys.Store {
	t.Helper()
	t.Setenv("PLUG_HOME", filepath.Join(t.TempDir(), ".plug"))
	store, err := keys.Home()
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// newCluster starts an agent and adds a profile for it, with a key pair,
// to store.
func newCluster(t *testing.T, store keys.Store, profile string) *cluster {
	t.Helper()
	p := tunneltest.NewPlatform()
	startAgentFor(t, store, profile, p)
	return &cluster{platform: p, profile: profile}
}

// startAgentFor starts an agent for platform and adds a profile for it,
// with a key pair, to store.
func startAgentFor(t *testing.T, store keys.Store, profile string, platform tunnel.Platform) {
	t.Helper()
	addr, hostKey, _ := tunneltest.StartAgent(t, platform)
	addProfile(t, store, profile, addr, hostKey)
}

// addProfile adds a profile for the agent at addr, with a key pair, to
// store.
func addProfile(t *testing.T, store keys.Store, profile, addr string, hostKey ssh.PublicKey) {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	portNum, _ := strconv.Atoi(port)
	if err := store.AddProfile(keys.Profile{Name: profile, Host: host, Port: portNum, HostKey: keys.AuthorizedKey(hostKey)}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := store.GenerateKey(profile, "dev@test", false); err != nil {
		t.Fatal(err)
	}
}

// workload serves HTTP on loopback, answering every request with text, as
// address ("name:port") of the cluster.
func (c *cluster) workload(t *testing.T, address, text string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, text) })}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	c.platform.AddWorkload(address, l.Addr().String())
}

// runPlug runs plug in-process, CMD's output and plug's status collected.
func runPlug(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut tunneltest.Buffer
	c := newCLI(strings.NewReader(""), &out, &errOut)
	code = c.main(args)
	return code, out.String(), errOut.String()
}

// silent is a platform whose names never come: an agent that has not
// told them yet.
type silent struct{ *tunneltest.Platform }

func (silent) WatchNames(ctx context.Context, _ func([]tunnel.ClusterName)) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestSilentAgentDelaysNothingElse: a run waits a few seconds at most for
// an agent that has not told its names (before CMD starts, or, where the
// run answers CMD's DNS, before it answers a lookup), says so, and the
// other profile's names work.
func TestSilentAgentDelaysNothingElse(t *testing.T) {
	store := useHome(t)
	startAgentFor(t, store, "quiet", silent{tunneltest.NewPlatform()})
	c := newCluster(t, store, "shop")
	c.platform.SetNames(k8sName("web", "shop", 18080))
	c.workload(t, "web:18080", "hello from web")
	start := time.Now()
	code, stdout, stderr := runPlug(t, "-p", "quiet", "-p", "shop", "-c", "--", "curl", "-sS", "--max-time", "20", "http://web:18080/")
	if code != 0 || stdout != "hello from web\n" || time.Since(start) > namesWait+25*time.Second {
		t.Fatalf("exit %d after %s\nstdout:\n%s\nstderr:\n%s", code, time.Since(start), stdout, stderr)
	}
	if !strings.Contains(stderr, "quiet: the agent has not told the cluster's names yet") {
		t.Fatalf("the silent agent was not told about:\n%s", stderr)
	}
}

// k8sName is the cluster name of Service name in namespace ns, in the
// forms a pod uses.
func k8sName(name, ns string, ports ...int) tunnel.ClusterName {
	return tunnel.ClusterName{Name: name, Aliases: []string{name + "." + ns, name + "." + ns + ".svc", name + "." + ns + ".svc.cluster.local"}, Ports: ports}
}
