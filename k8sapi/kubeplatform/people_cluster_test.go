package kubeplatform

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/k8sapi"
	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

func newSigner(t *testing.T) ssh.Signer {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Acceptance 2 with two agents of this process on the real cluster, each
// with its own Platform: a run with connections on both is one row of
// plug who asked of either; plug end asked of the other ends it, and
// every name is back within 5 s: the taken-over web equals what it was,
// the added name is gone, and so are the run's Leases. The takeover and
// the give-back are Events on web.
func TestWhoAndEndAcrossTwoAgentsOnTheCluster(t *testing.T) {
	k := needKube(t)
	k.deployWeb(t, 1)
	before := k.snapshot(t, "web")
	admin := newSigner(t)
	keysOf := tunneltest.Overseers{ssh.FingerprintSHA256(admin.PublicKey())}
	var addrs []string
	var hostKeys []ssh.PublicKey
	for _, id := range []string{"agent-a", "agent-b"} {
		p := k.platform(t, "", nil, nil)
		addr, hk, _ := tunneltest.StartAgent(t, p, func(a *tunnel.Agent) { a.ID, a.Keys = id, keysOf })
		addrs, hostKeys = append(addrs, addr), append(hostKeys, hk)
	}
	dev := newSigner(t)
	run := tunnel.RunInfo{ID: "0123456789abcdef0123456789abcdef", Version: "v2.30.0", Serves: true, Comment: "dev@laptop"}
	var sessions []*tunnel.Session
	for i, name := range []string{"web", "promo"} {
		s, err := tunnel.Connect(bg, tunnel.ClientConfig{Addr: addrs[i], User: "dev", Signer: dev, HostKey: hostKeys[i], Run: run})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if _, err := s.Serve(bg, name, 80, net.JoinHostPort(k.NodeIP, fmt.Sprint(k.local.port))); err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, s)
	}
	k.eventuallyAnswered(t, "http://web/", "local")

	for i := range addrs {
		cfg := tunnel.ClientConfig{Addr: addrs[i], User: "admin", Signer: admin, HostKey: hostKeys[i]}
		clustertest.Eventually(t, clustertest.Settle, "one row with both names from "+addrs[i], func() error {
			runs, all, err := tunnel.Who(bg, cfg)
			switch {
			case err != nil:
				return err
			case !all || len(runs) != 1:
				return fmt.Errorf("%d rows (all %t): %+v", len(runs), all, runs)
			case len(runs[0].Names) != 2 || runs[0].Names[0].Name != "promo" || runs[0].Names[0].Mode != tunnel.ModeAdded ||
				runs[0].Names[1].Name != "web" || runs[0].Names[1].Mode != tunnel.ModeParked:
				return fmt.Errorf("names %+v", runs[0].Names)
			case !slices.Equal(runs[0].Agents, []string{"agent-a", "agent-b"}) || runs[0].Comment != "dev@laptop" || runs[0].What() != "serving":
				return fmt.Errorf("row %+v", runs[0])
			}
			return nil
		})
	}
	leases, err := k.admin.Leases(k.Namespace).List(bg, k8sapi.ListOptions{LabelSelector: LabelRecord + "=run"})
	if err != nil || len(leases.Items) != 2 {
		t.Fatalf("the run's Leases: %v, %v", leases, err)
	}

	start := time.Now()
	ended, err := tunnel.End(bg, tunnel.ClientConfig{Addr: addrs[1], User: "admin", Signer: admin, HostKey: hostKeys[1]}, run.ID[:8], "the demo starts")
	if err != nil || ended.Run != run.ID {
		t.Fatalf("end: %+v %v", ended, err)
	}
	for _, s := range sessions {
		select {
		case <-s.Done():
		case <-time.After(clustertest.Settle):
			t.Fatal("a connection of the ended run goes on")
		}
		var e *tunnel.EndedError
		if !errors.As(s.Err(), &e) || e.Reason != "the demo starts" || !strings.HasPrefix(e.By, "admin (SHA256:") {
			t.Errorf("the developer reads: %v", s.Err())
		}
	}
	clustertest.Eventually(t, clustertest.Settle, "every name back", k.namesBack(t, before, "promo"))
	t.Logf("ended on both agents, every name back, %s after plug end", time.Since(start).Round(time.Millisecond))
	clustertest.Eventually(t, clustertest.Settle, "the run's Leases gone", func() error {
		l, err := k.admin.Leases(k.Namespace).List(bg, k8sapi.ListOptions{LabelSelector: LabelRecord + "=run"})
		if err != nil || len(l.Items) != 0 {
			return fmt.Errorf("%d Leases left, %v", len(l.Items), err)
		}
		return nil
	})
	k.eventuallyAnswered(t, "http://web/", "deployed")
	clustertest.Eventually(t, clustertest.Settle, "the Events on web", func() error {
		out := k.Kubectl(t, "get", "events", "--field-selector", "involvedObject.name=web", "-o", "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}")
		if !strings.Contains(out, EventTakeover+": taken over by the plug run of dev (SHA256:") || !strings.Contains(out, EventRestored+": given back by") {
			return fmt.Errorf("events: %q", out)
		}
		return nil
	})
}

// namesBack checks that web is as it was before and each name added is
// gone: what a run served is given back.
func (k *kube) namesBack(t *testing.T, before snapshot, added ...string) func() error {
	return func() error {
		if err := k.snapshot(t, "web").sameAs(before); err != nil {
			return err
		}
		for _, name := range added {
			if _, err := k.admin.Services(k.Namespace).Get(bg, name); !k8sapi.IsNotFound(err) {
				return fmt.Errorf("%s is still there: %v", name, err)
			}
		}
		return nil
	}
}
