//go:build unix

package swarmplatform

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// Make before break on the local swarm, measured: a caller service calls
// the taken-over name every 50 ms on new connections and on one kept alive
// (testdata/workload call) while the name changes hands. Each phase runs
// PLUG_TEST_REPS times (default 1). While the run is away the deployed
// service answers (its tasks started again). What the engine makes
// unavoidable is reported, not failed: a parked service's tasks are
// stopped (the engine's DNS goes on naming a stopping task for a moment),
// so a few callers fail at the takeover, and starting them again when the
// run goes away takes a second or two, which the first callers meanwhile
// wait for.

// startCaller starts a service running `workload call` on url and
// returns it.
func (s *testSwarm) startCaller(t *testing.T, url string) clustertest.Caller {
	t.Helper()
	spec := s.workloadSpec(s.name("calls"), "call", "-every", "50ms", "-timeout", "2s", url)
	spec.Mode = replicated(1)
	id := s.createService(t, spec, 1)
	tasks, err := s.c.Tasks(context.Background(), map[string][]string{"service": {id}, "desired-state": {"running"}})
	if err != nil || len(tasks) == 0 || tasks[0].Status.ContainerStatus == nil {
		t.Fatalf("the caller's container: %v", err)
	}
	container := tasks[0].Status.ContainerStatus.ContainerID
	return clustertest.Caller{Log: func(since time.Time) (string, error) {
		out, err := exec.Command(s.docker, "logs", "--since", since.UTC().Format(time.RFC3339), container).Output()
		return string(out), err
	}}
}

func repetitions() int {
	if n, err := strconv.Atoi(os.Getenv("PLUG_TEST_REPS")); err == nil && n > 0 {
		return n
	}
	return 1
}

// laterServer answers GET / with name from start on, on an address chosen
// at once: the developer's process, which plug starts after serving.
type laterServer struct {
	addr string
}

func newLaterServer(t *testing.T) *laterServer {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return &laterServer{addr: l.Addr().String()}
}

func (ls *laterServer) start(t *testing.T, name string) {
	l, err := net.Listen("tcp", ls.addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, name) })}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
}

// The counts of acceptance 5, with the agent deployed as a swarm service
// (its relays and the deployed tasks are on its network, as in
// production), reached through a proxy the test can cut.
func TestSwarmCallersWhenANameChangesHands(t *testing.T) {
	s := needSwarm(t)
	image := agentImage(t)
	name := s.name("web")
	s.removeRelays(t, name)
	spec := s.workloadSpec(name, "serve", "-name", "deployed", ":8080")
	spec.Mode = replicated(2)
	id := s.createService(t, spec, 2)
	before, _ := s.rawSpec(t, id)
	c := s.startCaller(t, "http://"+name+":8080/")
	c.Await(t, "deployed", time.Now(), time.Minute)

	agentAddr, hostKey := s.deployAgent(t, image)
	proxy := tunneltest.NewProxy(t, agentAddr)
	takeOver := func(t *testing.T, who string) (*tunnel.Session, time.Time) {
		t.Helper()
		sess := connectRun(t, proxy.Addr(), hostKey)
		ls := newLaterServer(t)
		start := time.Now()
		if _, err := sess.Serve(context.Background(), name, 8080, ls.addr); err != nil {
			t.Fatal(err)
		}
		ls.start(t, who)
		c.Await(t, who, start, 30*time.Second)
		return sess, start
	}
	restored := func(t *testing.T) {
		t.Helper()
		clustertest.Eventually(t, 60*time.Second, "the relay of "+name+" gone", func() error { return s.relayGone(name) })
		s.sameSpec(t, id, before)
		s.waitTasks(t, id, 2)
	}
	reps := repetitions()
	report := func(t *testing.T, phase string, ty clustertest.Tally) {
		t.Logf("%s, %d times: %s", phase, reps, ty)
		if len(ty.Failures) > 0 {
			t.Logf("%s: the first failures: %s", phase, strings.Join(ty.Failures[:min(5, len(ty.Failures))], "; "))
		}
	}

	t.Run("takeover, then Ctrl-C", func(t *testing.T) {
		var took, back clustertest.Tally
		for i := range reps {
			sess, start := takeOver(t, fmt.Sprintf("local-%d", i))
			closed := time.Now()
			sess.Close()
			c.Await(t, "deployed", time.Now(), 30*time.Second)
			restored(t)
			calls, end := c.Settled(t, start)
			took.Add(clustertest.TallyCalls(calls, start, closed))
			back.Add(clustertest.TallyCalls(calls, closed, end))
		}
		report(t, "takeover", took)
		report(t, "Ctrl-C", back)
		if back.NewFailed > 0 {
			t.Errorf("the give-back on Ctrl-C, which the engine lets plug make before it breaks, failed %d callers", back.NewFailed)
		}
	})

	t.Run("kill -9, grace, give-back", func(t *testing.T) {
		var sum, inFlight clustertest.Tally
		for i := range reps {
			sess, start := takeOver(t, fmt.Sprintf("killed-%d", i))
			killed := time.Now()
			proxy.Retarget("127.0.0.1:1") // plug is killed: no reconnect gets through
			proxy.Cut()
			clustertest.Eventually(t, 2*time.Minute, "the relay of "+name+" gone after the grace", func() error { return s.relayGone(name) })
			restored(t)
			sess.Close() // the killed plug never comes back
			proxy.Retarget(agentAddr)
			c.Await(t, "deployed", time.Now(), 30*time.Second)
			calls, end := c.Settled(t, start)
			inFlight.Add(clustertest.TallyCalls(calls, start, killed))
			sum.Add(clustertest.TallyCalls(calls, killed, end))
		}
		report(t, "sent before the kill", inFlight)
		report(t, "kill -9, grace, give-back", sum)
		// The parked service answers while the run is away: only the
		// callers of the moment its first task starts may fail.
		if sum.NewFailed*20 > sum.NewOK+sum.NewFailed {
			t.Errorf("%d of %d callers failed during the grace: the parked service does not answer while the run is away", sum.NewFailed, sum.NewOK+sum.NewFailed)
		}
	})

	t.Run("dropped, re-attached within the grace", func(t *testing.T) {
		var sum clustertest.Tally
		for i := range reps {
			who := fmt.Sprintf("back-%d", i)
			sess, start := takeOver(t, who)
			proxy.Retarget("127.0.0.1:1")
			proxy.Cut()
			c.Await(t, "deployed", time.Now(), 30*time.Second) // away: the parked service runs again
			proxy.Retarget(agentAddr)
			c.Await(t, who, time.Now(), 30*time.Second)
			sess.Close()
			restored(t)
			sum.Add(c.Count(t, start))
		}
		report(t, "dropped and re-attached", sum)
	})

	t.Run("the agent updated", func(t *testing.T) {
		var sum clustertest.Tally
		for i := range reps {
			who := fmt.Sprintf("updated-%d", i)
			sess, start := takeOver(t, who)
			if out, err := exec.Command(s.docker, "service", "update", "--force", "--detach", s.name("agent")).CombinedOutput(); err != nil {
				t.Fatalf("updating the agent: %v %s", err, out)
			}
			// Stop-first: the run finds no other agent, its names are given
			// back, and it comes back to the new agent, which takes web over
			// again.
			c.Await(t, "deployed", time.Now(), 90*time.Second)
			c.Await(t, who, time.Now(), 2*time.Minute)
			sess.Close()
			restored(t)
			sum.Add(c.Count(t, start))
		}
		report(t, "the agent updated", sum)
	})
}

// relayGone says whether name has no relay left.
func (s *testSwarm) relayGone(name string) error {
	relays, err := s.c.Services(context.Background(), map[string][]string{"label": {labelRelay + "=" + name}})
	if err == nil && len(relays) > 0 {
		err = fmt.Errorf("%d relays left", len(relays))
	}
	return err
}
