package tunnel_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"plug/tunnel"
	"plug/tunnel/tunneltest"
)

// waitCatalog waits until the session's catalog satisfies ok.
func waitCatalog(t *testing.T, s *tunnel.Session, within time.Duration, what string, ok func(tunnel.Catalog) bool) tunnel.Catalog {
	t.Helper()
	deadline := time.After(within)
	for {
		c, known, changed := s.Catalog()
		if known && ok(c) {
			return c
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("after %s the catalog still lacks %s: %+v", within, what, c)
		}
	}
}

func hasName(name string, port int) func(tunnel.Catalog) bool {
	return func(c tunnel.Catalog) bool {
		return slices.ContainsFunc(c.Names, func(n tunnel.ClusterName) bool { return n.Name == name && slices.Contains(n.Ports, port) })
	}
}

// TestCatalogFollowsThePlatform: a run learns the names at once, and every
// change within a moment, also after a reconnect.
func TestCatalogFollowsThePlatform(t *testing.T) {
	p := tunneltest.NewPlatform()
	p.SetNames(tunnel.ClusterName{Name: "web", Aliases: []string{"web.shop"}, Ports: []int{80}})
	addr, hostKey, _ := tunneltest.StartAgent(t, p)
	proxy := tunneltest.NewProxy(t, addr)
	signer, _ := newKey(t)
	s, _ := connect(t, proxy.Addr(), hostKey, signer, tunnel.RunInfo{})

	c := waitCatalog(t, s, 2*time.Second, "web:80", hasName("web", 80))
	if c.Unavailable != "" || len(c.Names) != 1 || !slices.Equal(c.Names[0].Aliases, []string{"web.shop"}) {
		t.Fatalf("catalog %+v", c)
	}
	start := time.Now()
	p.SetNames(tunnel.ClusterName{Name: "web", Ports: []int{80}}, tunnel.ClusterName{Name: "api", Ports: []int{9000}})
	waitCatalog(t, s, 2*time.Second, "api:9000", hasName("api", 9000))
	t.Logf("a new name reached the run in %s", time.Since(start))

	proxy.Cut()
	p.SetNames(tunnel.ClusterName{Name: "api", Ports: []int{9000}})
	waitCatalog(t, s, 10*time.Second, "web gone after the reconnect", func(c tunnel.Catalog) bool { return !hasName("web", 80)(c) && hasName("api", 9000)(c) })
}

// TestCarryReachesAWorkload: a local connection carried to a name reaches
// the workload behind it, both ways.
func TestCarryReachesAWorkload(t *testing.T) {
	p := tunneltest.NewPlatform()
	p.AddWorkload("web:80", echoServer(t, "web says "))
	p.SetNames(tunnel.ClusterName{Name: "web", Ports: []int{80}})
	addr, hostKey, _ := tunneltest.StartAgent(t, p)
	signer, _ := newKey(t)
	s, _ := connect(t, addr, hostKey, signer, tunnel.RunInfo{})

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go s.Carry(context.Background(), c, "web:80")
		}
	}()
	expectEcho(t, func() (net.Conn, error) { return net.Dial("tcp", l.Addr().String()) }, "web says ")
}

// TestCarryRefusesAtOnce: a name nothing answers behind fails at once with
// the agent's reason, the local connection left to the caller.
func TestCarryRefusesAtOnce(t *testing.T) {
	p := tunneltest.NewPlatform()
	p.SetNames(tunnel.ClusterName{Name: "idle", Ports: []int{80}})
	addr, hostKey, _ := tunneltest.StartAgent(t, p)
	signer, _ := newKey(t)
	s, _ := connect(t, addr, hostKey, signer, tunnel.RunInfo{})

	local, remote := net.Pipe()
	defer local.Close()
	start := time.Now()
	err := s.Carry(context.Background(), remote, "idle:80")
	var dialErr *tunnel.DialError
	if !errors.As(err, &dialErr) {
		t.Fatalf("Carry to a name without endpoints: %v, want a *tunnel.DialError", err)
	}
	// README: "refused at once ... within milliseconds"; the platform
	// refuses at once, so the time is all the agent's and the client's.
	if took := time.Since(start); took > time.Second {
		t.Fatalf("plug's refusal took %s", took)
	}
	t.Logf("refused in %s: %v", time.Since(start), err)
}
