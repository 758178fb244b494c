package tunnel_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"plug/keys"
	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// memSlots keeps audit slots in memory, versioned as the cluster does.
type memSlots struct {
	mu    sync.Mutex
	data  [tunnel.AuditRingSlots][]byte
	vers  [tunnel.AuditRingSlots]int
	clash int // the conflicts met
}

func (m *memSlots) ReadAuditSlot(_ context.Context, i int) ([]byte, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.vers[i] == 0 {
		return nil, "", nil
	}
	return append([]byte(nil), m.data[i]...), strconv.Itoa(m.vers[i]), nil
}

func (m *memSlots) WriteAuditSlot(_ context.Context, i int, data []byte, version string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	have := ""
	if m.vers[i] > 0 {
		have = strconv.Itoa(m.vers[i])
	}
	if version != have {
		m.clash++
		return "", tunnel.ErrAuditConflict
	}
	m.vers[i]++
	m.data[i] = append([]byte(nil), data...)
	return strconv.Itoa(m.vers[i]), nil
}

func TestReplicasAppendWithoutLosingLines(t *testing.T) {
	slots := &memSlots{}
	ctx := context.Background()
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := tunnel.NewAuditKeeper(slots, t.Logf)
			for i := range 20 {
				k.Add(tunnel.AuditEvent{Time: time.Now().UTC(), Event: tunnel.AuditRunOpened, Run: fmt.Sprintf("r%d-%d", r, i)})
				k.Flush(ctx)
			}
		}()
	}
	wg.Wait()
	trail, err := tunnel.ReadAuditTrail(ctx, slots)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range trail {
		seen[e.Run] = true
	}
	if len(seen) != 60 || len(trail) != 60 {
		t.Fatalf("the trail has %d lines of %d runs, want 60 of 60 (conflicts met: %d)", len(trail), len(seen), slots.clash)
	}
}

func TestRingIsBoundedBySize(t *testing.T) {
	slots := &memSlots{}
	ctx := context.Background()
	k := tunnel.NewAuditKeeper(slots, t.Logf)
	reason := string(make([]byte, 3000))
	total := 0
	for i := range 1200 {
		k.Add(tunnel.AuditEvent{Time: time.Now().UTC(), Event: tunnel.AuditRunRefused, Run: fmt.Sprintf("r%d", i), Reason: reason})
		k.Flush(ctx)
		total++
	}
	size := 0
	for i := range tunnel.AuditRingSlots {
		if len(slots.data[i]) > tunnel.AuditSlotMax {
			t.Errorf("slot %d holds %d bytes, more than %d", i, len(slots.data[i]), tunnel.AuditSlotMax)
		}
		size += len(slots.data[i])
	}
	trail, _ := tunnel.ReadAuditTrail(ctx, slots)
	if len(trail) == 0 || len(trail) == total || trail[len(trail)-1].Run != "r1199" {
		t.Fatalf("after %d lines of 3 kB the ring keeps %d (%d bytes), the newest last: want the newest only", total, len(trail), size)
	}
}

func TestSearchFindsRunByNameAndTime(t *testing.T) {
	at := func(h int) time.Time { return time.Date(2026, 12, 1, h, 0, 0, 0, time.UTC) }
	trail := []tunnel.AuditEvent{
		{Time: at(9), Event: tunnel.AuditRunOpened, Run: "a", User: "alice", Key: "SHA256:aa"},
		{Time: at(10), Event: tunnel.AuditNameServed, Run: "a", Key: "SHA256:aa", Name: "checkout", Port: 80, Mode: tunnel.ModeParked},
		{Time: at(16), Event: tunnel.AuditRunEnded, Run: "a", Key: "SHA256:aa", How: tunnel.EndGoodbye, Names: []string{"checkout:80"}},
		{Time: at(11), Event: tunnel.AuditRunOpened, Run: "b", User: "bob", Key: "SHA256:bb"},
		{Time: at(12), Event: tunnel.AuditNameServed, Run: "b", Key: "SHA256:bb", Name: "cart", Port: 80, Mode: tunnel.ModeAdded},
		{Time: at(13), Event: tunnel.AuditRunEnded, Run: "b", Key: "SHA256:bb", How: tunnel.EndGoodbye},
		{Time: at(14), Event: tunnel.AuditKeyAccepted, User: "carol", Key: "SHA256:cc", By: "alice"},
	}
	runs := func(q tunnel.AuditQuery) string {
		out := ""
		for _, e := range q.Select(trail) {
			out += e.Run + e.Event[:1] + " "
		}
		return out
	}
	for _, c := range []struct {
		q    tunnel.AuditQuery
		want string
	}{
		{tunnel.AuditQuery{Name: "checkout", Since: at(15), Until: at(15)}, "ar an ar "}, // on Tuesday at three
		{tunnel.AuditQuery{Name: "checkout", Since: at(17)}, ""},
		{tunnel.AuditQuery{Name: "cart"}, "br bn br "},
		{tunnel.AuditQuery{User: "BO"}, "br bn br "},
		{tunnel.AuditQuery{Key: "SHA256:c"}, "k "},
		{tunnel.AuditQuery{Since: at(13), Until: at(14)}, "ar an ar br bn br k "},
	} {
		if got := runs(c.q); got != c.want {
			t.Errorf("%+v found %q, want %q", c.q, got, c.want)
		}
	}
}

// ringPlatform is the test platform keeping an audit ring, as the
// Kubernetes one does.
type ringPlatform struct {
	*tunneltest.Platform
	*memSlots
}

// The audit search over the tunnel: an overseer finds a run that served
// web, whole (opened, name, ended); a plain key is refused; an agent
// whose platform keeps no ring says so.
func TestAuditSearchOverTheTunnel(t *testing.T) {
	platform := ringPlatform{tunneltest.NewPlatform(), &memSlots{}}
	admin, _ := newKey(t)
	dev, _ := newKey(t)
	keeper := tunnel.NewAuditKeeper(platform, t.Logf)
	addr, host, _ := tunneltest.StartAgent(t, platform, func(a *tunnel.Agent) {
		a.Keys, a.Audit = tunneltest.Overseers{keys.Fingerprint(admin.PublicKey())}, keeper.Add
	})
	ctx := ctxFor(t, 30*time.Second)
	s, _ := connect(t, addr, host, dev, tunnel.RunInfo{ID: "run-serving-web", Serves: true})
	if _, err := s.Serve(ctx, "web", 80, echoServer(t, "")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	q := tunnel.AuditQuery{Name: "web", Since: time.Now().Add(-time.Minute)}
	adminCfg := tunnel.ClientConfig{Addr: addr, User: "admin", Signer: admin, HostKey: host}
	var found []string
	clustertest.Until(t, clustertest.Settle, "the run whole in the search", func() bool {
		keeper.Flush(ctx)
		events, err := tunnel.SearchAudit(ctx, adminCfg, q)
		found = nil
		for _, e := range events {
			if e.Run == "run-serving-web" {
				found = append(found, e.Event)
			}
		}
		return err == nil && slices.Contains(found, tunnel.AuditRunOpened) && slices.Contains(found, tunnel.AuditNameServed) &&
			slices.Contains(found, tunnel.AuditRunEnded)
	})
	if events, err := tunnel.SearchAudit(ctx, adminCfg, tunnel.AuditQuery{Name: "cart"}); err != nil || len(events) != 0 {
		t.Errorf("a search for a name nobody served: %v, %v", events, err)
	}
	devCfg := tunnel.ClientConfig{Addr: addr, User: "dev", Signer: dev, HostKey: host}
	if _, err := tunnel.SearchAudit(ctx, devCfg, q); err == nil || !strings.Contains(err.Error(), "only members") {
		t.Errorf("a plain key's search: %v", err)
	}
	plain, plainHost, _ := tunneltest.StartAgent(t, tunneltest.NewPlatform(), func(a *tunnel.Agent) {
		a.Keys = tunneltest.Overseers{keys.Fingerprint(admin.PublicKey())}
	})
	if _, err := tunnel.SearchAudit(ctx, tunnel.ClientConfig{Addr: plain, User: "admin", Signer: admin, HostKey: plainHost}, q); err == nil || !strings.Contains(err.Error(), "log only") {
		t.Errorf("a search of an agent keeping no ring: %v", err)
	}
}
