package cli

import (
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"plug/keys"
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
	addr, hostKey, _ := tunneltest.StartAgent(t, p)
	host, port, _ := net.SplitHostPort(addr)
	portNum, _ := strconv.Atoi(port)
	if err := store.AddProfile(keys.Profile{Name: profile, Host: host, Port: portNum, HostKey: keys.AuthorizedKey(hostKey)}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := store.GenerateKey(profile, "dev@test", false); err != nil {
		t.Fatal(err)
	}
	return &cluster{platform: p, profile: profile}
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
	var out, errOut lockedBuffer
	c := &cli{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut}
	code = c.main(args)
	return code, out.String(), errOut.String()
}
