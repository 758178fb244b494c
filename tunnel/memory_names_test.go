package tunnel_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/tunnel"
)

// scaleNames is a namespace of n Services as the scale benchmark makes
// them: svc-00000… with the aliases of their namespace and two ports.
func scaleNames(n int) []tunnel.ClusterName {
	names := make([]tunnel.ClusterName, n)
	for i := range names {
		s := fmt.Sprintf("svc-%05d", i)
		names[i] = tunnel.ClusterName{Name: s, Aliases: []string{s + ".plug-scale", s + ".plug-scale.svc", s + ".plug-scale.svc.cluster.local"}, Ports: []int{80, 8080}}
	}
	return names
}

// TestTheAgentsMemoryWithManyNamesAndRuns: an agent process whose cluster
// has 10,000 names holds at most 40 MiB of resident memory (the test's
// platform keeps a copy of the names too), told to 200 runs at most 150
// MiB, and comes back within 30 MiB once they have ended; what a name and
// a run cost it is logged (deploy/README.md, "What a key can make the
// agent hold").
func TestTheAgentsMemoryWithManyNamesAndRuns(t *testing.T) {
	const names, runs = 10000, 200
	const namesMiB, withRunsMiB, idleMiB = 40, 150, 30
	signer, _ := newKey(t)
	// connectAll connects n runs, 16 at a time, each waiting until it has
	// been told every name.
	connectAll := func(addr string, hostKey ssh.PublicKey, n, want int) []*tunnel.Session {
		sessions := make([]*tunnel.Session, n)
		var wg sync.WaitGroup
		at := make(chan struct{}, 16)
		for i := range sessions {
			wg.Go(func() {
				at <- struct{}{}
				defer func() { <-at }()
				deadline := time.Now().Add(2 * time.Minute)
				for sessions[i] == nil {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					s, err := tunnel.Connect(ctx, tunnel.ClientConfig{Addr: addr, User: "dev", Signer: signer, HostKey: hostKey, Run: tunnel.RunInfo{ID: fmt.Sprintf("run-%03d", i)}, Profile: "test"})
					cancel()
					if err != nil && time.Now().After(deadline) { // a handshake may time out on a busy machine: the run tries again until then
						t.Errorf("run %d: %v", i, err)
						return
					}
					sessions[i] = s
				}
				waitCatalog(t, sessions[i], 2*time.Minute, "every name", func(c tunnel.Catalog) bool { return len(c.Names) == want })
			})
		}
		wg.Wait()
		return sessions
	}
	// settled waits until the agent's resident memory is within bound
	// (it gives freed memory back every 10 s), and returns it in KiB.
	settled := func(pid, boundMiB int, what string) int {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		tick := time.NewTicker(time.Second) // the agent returns memory on its own clock
		defer tick.Stop()
		for {
			rss, _ := residentKiB(t, pid)
			if rss>>10 <= boundMiB {
				return rss
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s, the agent's resident memory is %d MiB after a minute, want at most %d MiB", what, rss>>10, boundMiB)
			}
			<-tick.C
		}
	}

	addr, hostKey, pid := startAgentProcess(t, 1024)
	one := connectAll(addr, hostKey, 1, 1)
	fresh := settled(pid, idleMiB, "with one name")
	one[0].Close()

	addr, hostKey, pid = startAgentProcess(t, 1024, agentNamesEnv+"="+strconv.Itoa(names))
	one = connectAll(addr, hostKey, 1, names)
	idle := settled(pid, namesMiB, fmt.Sprintf("with %d names", names))
	one[0].Close()

	start := time.Now()
	sessions := connectAll(addr, hostKey, runs, names)
	rss, peak := residentKiB(t, pid)
	t.Logf("the agent's resident memory: %.1f MiB with one name, %.1f MiB with %d (%.0f bytes a name); %.1f MiB with %d runs told them (peak %.1f MiB, %.0f KiB a run, all connected in %s)",
		float64(fresh)/1024, float64(idle)/1024, names, float64(idle-fresh)*1024/names, float64(rss)/1024, runs, float64(peak)/1024, float64(rss-idle)/runs, time.Since(start).Round(time.Second))
	if peak>>10 > withRunsMiB {
		t.Errorf("the agent's peak resident memory with %d names and %d runs is %d MiB, want at most %d", names, runs, peak>>10, withRunsMiB)
	}
	for _, s := range sessions {
		if s != nil {
			s.Close()
		}
	}
	after := settled(pid, idleMiB, "after the runs ended")
	t.Logf("after the runs ended: %.1f MiB", float64(after)/1024)
}
