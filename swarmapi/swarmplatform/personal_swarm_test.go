//go:build unix

package swarmplatform

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// execConn is a connection a task opens: `workload tcp ADDR` run in its
// container with docker exec, its standard input and output.
type execConn struct {
	cmd *exec.Cmd
	io.Reader
	io.WriteCloser
}

func (c *execConn) Close() error {
	c.WriteCloser.Close()
	c.cmd.Process.Kill()
	c.cmd.Wait()
	return nil
}

func (c *execConn) LocalAddr() net.Addr                { return &net.TCPAddr{} }
func (c *execConn) RemoteAddr() net.Addr               { return &net.TCPAddr{} }
func (c *execConn) SetDeadline(t time.Time) error      { return nil }
func (c *execConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *execConn) SetWriteDeadline(t time.Time) error { return nil }

// taskClient is an HTTP client (HTTP/1.1, or h2c with h2) whose
// connections the task of container opens to address.
func (s *testSwarm) taskClient(container, address string, h2 bool) *http.Client {
	return tunneltest.HTTPClient(func(ctx context.Context) (net.Conn, error) {
		cmd := exec.Command(s.docker, "exec", "-i", container, "/workload", "tcp", "-timeout", "5s", address)
		in, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		return &execConn{cmd: cmd, Reader: out, WriteCloser: in}, nil
	}, h2)
}

// Acceptance 2 of Swarm at parity: two developers take one service over
// personally on the deployed agent, with X-Dev: alice and X-Dev: bob; a
// caller task's requests, over HTTP/1.1 and h2c, and its gRPC-framed
// calls, reach each by header and the deployed tasks otherwise, every
// time; the parked service runs no task while a copy of it runs its two;
// when both runs end the service is restored exactly and the copy is gone.
func TestPersonalTakeoversOnTheDeployedSwarmAgent(t *testing.T) {
	s := needSwarm(t)
	image := agentImage(t)
	name := s.name("shop")
	spec := s.workloadSpec(name, "serve", "-name", "deployed", ":8080")
	spec.Mode = replicated(2)
	id := s.createService(t, spec, 2)
	before, _ := s.rawSpec(t, id)
	s.removeRelays(t, name)
	t.Cleanup(func() { s.c.RemoveService(context.Background(), copyName(name)) })
	caller := s.caller(t)
	addr, hostKey := s.deployAgent(t, image)

	runs := map[string]*tunnel.Session{}
	for _, dev := range []string{"alice", "bob"} {
		sess := connectRun(t, addr, hostKey)
		filter := tunnel.Filter{Headers: []tunnel.HeaderMatch{{Name: "X-Dev", Value: dev}}}
		served, err := sess.ServeFiltered(context.Background(), name, 8080, tunneltest.DevServer(t, dev), filter)
		if err != nil {
			t.Fatalf("%s's personal takeover: %v", dev, err)
		}
		t.Logf("%s: %s", dev, served.Detail)
		runs[dev] = sess
	}
	if n, _ := s.running(id); n != 0 {
		t.Errorf("the parked service runs %d tasks", n)
	}
	cp, err := s.c.Service(context.Background(), copyName(name))
	if err != nil {
		t.Fatalf("the copy of the parked service: %v", err)
	}
	s.waitTasks(t, cp.ID, 2)

	url := "http://" + name + ":8080/"
	for _, h2 := range []bool{false, true} {
		proto := "HTTP/1.1"
		if h2 {
			proto = "HTTP/2.0"
		}
		c := s.taskClient(caller, name+":8080", h2)
		want := map[string]string{"alice": "alice " + proto, "bob": "bob " + proto, "": "deployed"}
		// The engine's DNS may name a stopping task of the parked service
		// a moment after the takeover.
		clustertest.Eventually(t, clustertest.Settle, proto+" routed by header", func() error {
			for dev, w := range want {
				if got, err := tunneltest.Ask(c, url, "X-Dev", dev); err != nil || got != w {
					return fmt.Errorf("X-Dev %q: %q, %v; want %q", dev, got, err, w)
				}
			}
			return nil
		})
		wrong := 0
		const rounds = 20
		for range rounds {
			for dev, w := range want {
				if got, err := tunneltest.Ask(c, url, "X-Dev", dev); err != nil || got != w {
					wrong++
					t.Logf("%s X-Dev %q: %q, %v; want %q", proto, dev, got, err, w)
				}
			}
		}
		t.Logf("%s: %d requests, %d answered by the wrong one or failed", proto, rounds*len(want), wrong)
		if wrong > 0 {
			t.Errorf("%s: %d of %d requests went wrong", proto, wrong, rounds*len(want))
		}
		c.CloseIdleConnections()
	}

	h2 := s.taskClient(caller, name+":8080", true)
	for dev, who := range map[string]string{"alice": "alice", "bob": "bob", "": "deployed"} {
		messages := []string{"one", "two", "three"}
		answers, status, err := tunneltest.GRPCCall(h2, url+"test.Echo/Call", "X-Dev", dev, messages...)
		want := []string{who + ": one", who + ": two", who + ": three"}
		if err != nil || status != "0" || !slices.Equal(answers, want) {
			t.Errorf("gRPC with X-Dev %q: %q, status %q, %v; want %q", dev, answers, status, err, want)
		}
	}
	h2.CloseIdleConnections()

	runs["alice"].Close()
	c := s.taskClient(caller, name+":8080", false)
	for dev, w := range map[string]string{"bob": "bob HTTP/1.1", "": "deployed", "alice": "deployed"} {
		if got, err := tunneltest.Ask(c, url, "X-Dev", dev); err != nil || got != w {
			t.Errorf("after alice left, X-Dev %q: %q, %v; want %q", dev, got, err, w)
		}
	}
	c.CloseIdleConnections()
	runs["bob"].Close()
	clustertest.Eventually(t, clustertest.Settle, "the relay of "+name+" gone", func() error { return s.relayGone(name) })
	s.sameSpec(t, id, before)
	s.waitTasks(t, id, 2)
	if _, err := s.c.Service(context.Background(), copyName(name)); err == nil {
		t.Errorf("the copy %s is left after the name was given back", copyName(name))
	}
	if got := strings.Join(s.answersOf(t, caller, url), " "); got != "deployed" {
		t.Errorf("after both runs, %s answers %q, want deployed", url, got)
	}
}

// answersOf is what one request to url from container answers.
func (s *testSwarm) answersOf(t *testing.T, container, url string) []string {
	t.Helper()
	var got []string
	clustertest.Eventually(t, clustertest.Settle, url+" answered", func() (err error) {
		got, err = s.get(container, url, 1)
		return err
	})
	return got
}
