package tunnel_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
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

// TestCatalogChangeCostsEachRunOneSmallMessage: with 200 runs connected
// to an agent whose cluster has 2,000 names, a Service created reaches
// every run (the time it took is logged: the benchmark reports it), and
// the agent sends each run a few hundred bytes for it, not the catalog
// again: what it sends grows with the runs, not with the names.
func TestCatalogChangeCostsEachRunOneSmallMessage(t *testing.T) {
	const runs, names = 200, 2000
	cluster := shopNamespace(names)
	p := tunneltest.NewPlatform()
	p.SetNames(cluster...)
	addr, hostKey, _ := tunneltest.StartAgent(t, p, func(a *tunnel.Agent) { a.Limits = tunnel.Limits{Runs: runs + 1, RunsPerKey: runs, ConnsPerKey: runs} })
	proxy := tunneltest.NewProxy(t, addr)
	signer, _ := newKey(t)
	sessions := make([]*tunnel.Session, runs)
	var wg sync.WaitGroup
	at := make(chan struct{}, 16) // within one address's share of handshakes at once
	for i := range sessions {
		wg.Go(func() {
			at <- struct{}{}
			defer func() { <-at }()
			sessions[i], _ = connect(t, proxy.Addr(), hostKey, signer, tunnel.RunInfo{ID: fmt.Sprintf("run-%03d", i)})
		})
	}
	wg.Wait()
	for _, s := range sessions {
		waitCatalog(t, s, 30*time.Second, "every name", func(c tunnel.Catalog) bool { return len(c.Names) == names })
	}
	whole := proxy.Down()

	before := proxy.Down()
	start := time.Now()
	p.SetNames(append(cluster, tunnel.ClusterName{Name: "fresh", Aliases: []string{"fresh.shop"}, Ports: []int{8080}})...)
	for _, s := range sessions {
		waitCatalog(t, s, 30*time.Second, "fresh:8080", hasName("fresh", 8080))
	}
	took := time.Since(start)
	perRun := float64(proxy.Down()-before) / runs
	t.Logf("%d runs, %d names: the whole catalog cost %.0f bytes per run; one new name reached every run in %s, %.0f bytes per run", runs, names, float64(whole)/runs, took, perRun)
	if perRun > 1024 {
		t.Fatalf("one new name cost %.0f bytes per run (the whole catalog: %.0f); want a small message", perRun, float64(whole)/runs)
	}
}

// TestCatalogOnlyWhenAsked: a session that said NamesWhenAsked receives
// no catalog until it asks, however large the cluster's, while a session
// that did not gets it at once; once asked, the whole catalog comes, then
// each change, also after a reconnect.
func TestCatalogOnlyWhenAsked(t *testing.T) {
	const names = 2000
	cluster := shopNamespace(names)
	p := tunneltest.NewPlatform()
	p.SetNames(cluster...)
	addr, hostKey, _ := tunneltest.StartAgent(t, p)
	signer, _ := newKey(t)
	lazyProxy, eagerProxy := tunneltest.NewProxy(t, addr), tunneltest.NewProxy(t, addr)
	lazy, _ := connect(t, lazyProxy.Addr(), hostKey, signer, tunnel.RunInfo{ID: "lazy"}, func(c *tunnel.ClientConfig) { c.NamesWhenAsked = true })
	eager, _ := connect(t, eagerProxy.Addr(), hostKey, signer, tunnel.RunInfo{ID: "eager"})
	waitCatalog(t, eager, 10*time.Second, "every name", func(c tunnel.Catalog) bool { return len(c.Names) == names })
	whole := eagerProxy.Down()

	// A round trip on the lazy session's control channel: the agent has
	// answered its hello and more by now.
	if _, err := lazy.Serve(context.Background(), "lazy-run", 8080, "127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	if _, known, _ := lazy.Catalog(); known || lazyProxy.Down() > whole/4 {
		t.Fatalf("before asking, the session knows a catalog (%v) or was sent %d bytes (the whole catalog: %d)", known, lazyProxy.Down(), whole)
	}
	before := lazyProxy.Down()
	lazy.AskNames()
	waitCatalog(t, lazy, 10*time.Second, "every name once asked", func(c tunnel.Catalog) bool { return len(c.Names) >= names })
	t.Logf("the whole catalog of %d names: %d bytes; the lazy session was sent %d bytes before asking", names, whole, before)

	p.SetNames(append(cluster, tunnel.ClusterName{Name: "fresh", Ports: []int{8080}})...)
	waitCatalog(t, lazy, 10*time.Second, "fresh:8080", hasName("fresh", 8080))
	lazyProxy.Cut()
	p.SetNames(cluster[1:]...)
	waitCatalog(t, lazy, 20*time.Second, "fresh and the first name gone after the reconnect", func(c tunnel.Catalog) bool {
		return !hasName("fresh", 8080)(c) && !hasName(cluster[0].Name, 80)(c) && hasName(cluster[names-1].Name, 80)(c)
	})
}

// shopNamespace is the catalog of a Kubernetes namespace "shop" of n
// Services service-0000…, two ports each, with the aliases the platform
// gives them.
func shopNamespace(n int) []tunnel.ClusterName {
	var cluster []tunnel.ClusterName
	for i := range n {
		name := fmt.Sprintf("service-%04d", i)
		cluster = append(cluster, tunnel.ClusterName{Name: name, Aliases: []string{name + ".shop", name + ".shop.svc", name + ".shop.svc.cluster.local"}, Ports: []int{80, 9090}})
	}
	return cluster
}
