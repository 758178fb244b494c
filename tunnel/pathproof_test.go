package tunnel_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// routedPlatform is the in-memory platform whose names can be routed
// elsewhere than the run serving them, as a controller that reverts a
// takeover does; a route change is told to the agent as a path change.
// It counts the connections the agent makes through it: its probes.
type routedPlatform struct {
	*tunneltest.Platform
	dials  atomic.Int32
	mu     sync.Mutex
	routes map[string]string // "name:port" → the address answering it instead; "" refuses
	notify map[string]func(tunnel.Event)
}

func newRoutedPlatform() *routedPlatform {
	return &routedPlatform{Platform: tunneltest.NewPlatform(), routes: map[string]string{}, notify: map[string]func(tunnel.Event){}}
}

func (p *routedPlatform) Serve(ctx context.Context, b tunnel.Binding) (tunnel.Served, error) {
	p.mu.Lock()
	p.notify[b.Name] = b.Notify
	p.mu.Unlock()
	return p.Platform.Serve(ctx, b)
}

func (p *routedPlatform) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	p.dials.Add(1)
	p.mu.Lock()
	to, routed := p.routes[address]
	p.mu.Unlock()
	switch {
	case !routed:
		return p.Platform.DialContext(ctx, network, address)
	case to == "":
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	var d net.Dialer
	return d.DialContext(ctx, network, to)
}

// probed waits until the agent has made n more probes than it had made
// when from was read from p.dials.
func (p *routedPlatform) probed(t *testing.T, from int32, n int32) {
	t.Helper()
	clustertest.Until(t, clustertest.Settle, fmt.Sprintf("%d probes", n), func() bool { return p.dials.Load() >= from+n })
}

// route sends address to `to` ("" refuses it; unroute gives it back to the
// run) and tells the agent the path of name changed.
func (p *routedPlatform) route(name, address, to string) {
	p.mu.Lock()
	p.routes[address] = to
	n := p.notify[name]
	p.mu.Unlock()
	n(tunnel.Event{Name: name, Kind: tunnel.EventPathChanged})
}

func (p *routedPlatform) unroute(name, address string) {
	p.mu.Lock()
	delete(p.routes, address)
	n := p.notify[name]
	p.mu.Unlock()
	n(tunnel.Event{Name: name, Kind: tunnel.EventPathChanged})
}

// countingEcho is the developer's process: an echo server that counts the
// connections it accepts.
func countingEcho(t *testing.T, prefix string) (string, *atomic.Int32) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var accepted atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					io.WriteString(c, prefix+line)
				}
			}()
		}
	}()
	return l.Addr().String(), &accepted
}

// agentLog collects the agent's log lines.
func agentLog(log *lines) func(*tunnel.Agent) {
	return func(a *tunnel.Agent) {
		prev := a.Logf
		a.Logf = func(format string, args ...any) {
			fmt.Fprintf(log, format+"\n", args...)
			prev(format, args...)
		}
	}
}

// The agent proves a served name's path from inside the cluster, again on
// each change, without the developer's process ever seeing a probe, and
// says nothing to the developer while the path is right. Callers keep
// reaching the process, their bytes intact.
func TestPathProofNeverReachesTheDevelopersProcess(t *testing.T) {
	t.Parallel()
	platform := newRoutedPlatform()
	var log lines
	addr, hostKey, _ := tunneltest.StartAgent(t, platform, agentLog(&log))
	signer, _ := newKey(t)
	s, events := connect(t, addr, hostKey, signer, tunnel.RunInfo{ID: "run-proof", Serves: true})
	local, accepted := countingEcho(t, "laptop says ")
	if _, err := s.Serve(ctxFor(t, 20*time.Second), "web", 80, local); err != nil {
		t.Fatal(err)
	}
	clustertest.Until(t, clustertest.Settle, "the agent to log the path proven", func() bool { return log.has("web: path proven") })
	for range 5 { // each change is a burst of probes
		probes := platform.dials.Load()
		platform.unroute("web", "web:80")
		platform.probed(t, probes, 1)
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("the developer's process accepted %d connections; no caller called it yet", n)
	}
	for range 20 {
		if err := echoOnce(platformDial(platform.Platform, "web:80"), "laptop says "); err != nil {
			t.Fatalf("a caller during the probes: %v", err)
		}
	}
	if n := accepted.Load(); n != 20 {
		t.Errorf("the developer's process accepted %d connections for 20 callers", n)
	}
	if strings.Contains(events.String(), "web") {
		t.Errorf("the developer was told something about a path that is right:\n%s", events)
	}
}

// When the name is answered by something else, or by nothing, the
// developer is told once in these words, and told again when the name
// reaches the run again.
func TestPathProofWarnsOnChangeAndSaysWhenHealed(t *testing.T) {
	t.Parallel()
	platform := newRoutedPlatform()
	addr, hostKey, _ := tunneltest.StartAgent(t, platform)
	signer, _ := newKey(t)
	s, events := connect(t, addr, hostKey, signer, tunnel.RunInfo{ID: "run-warn", Serves: true})
	local, accepted := countingEcho(t, "laptop says ")
	if _, err := s.Serve(ctxFor(t, 20*time.Second), "web", 80, local); err != nil {
		t.Fatal(err)
	}
	deployed, deployedAccepted := countingEcho(t, "deployed says ")

	const elsewhere = "[warning] web is answered by something else: "
	start := time.Now()
	platform.route("web", "web:80", deployed)
	clustertest.Until(t, 30*time.Second, "the warning that web is answered by something else", func() bool { return events.has(elsewhere) })
	t.Logf("warned %s after the name went elsewhere", time.Since(start).Round(100*time.Millisecond))
	probes := platform.dials.Load()
	platform.route("web", "web:80", deployed) // the same state again: nothing new to say
	platform.probed(t, probes, 3)             // the first two of them judged
	if n := strings.Count(events.String(), elsewhere); n != 1 {
		t.Errorf("warned %d times:\n%s", n, events)
	}
	if deployedAccepted.Load() == 0 {
		t.Error("the probes did not reach the deployed workload")
	}

	platform.unroute("web", "web:80")
	clustertest.Until(t, 30*time.Second, "the path healed", func() bool {
		return events.has("[healed] web reaches this run again: a connection to web:80 from inside the cluster arrived here")
	})

	platform.route("web", "web:80", "")
	clustertest.Until(t, 30*time.Second, "the warning that web is not reachable", func() bool {
		return events.has("[warning] web is not reachable inside the cluster: the agent's connection to web:80 was refused")
	})
	if n := accepted.Load(); n != 0 {
		t.Errorf("the developer's process accepted %d connections; nobody called it", n)
	}
}
