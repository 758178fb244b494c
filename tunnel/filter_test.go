package tunnel_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/memplatform"
	"plug/tunnel/tunneltest"
)

// httpAnswer serves HTTP/1.1 and h2c on loopback until the test ends,
// answering each request "WHO PROTO".
func httpAnswer(t *testing.T, who string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &protocols, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", who, r.Proto)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

// callerClient is an HTTP client of a cluster name through the platform.
func callerClient(p *tunneltest.Platform, address string, h2 bool) *http.Client {
	return tunneltest.HTTPClient(func(ctx context.Context) (net.Conn, error) { return p.DialContext(ctx, "tcp", address) }, h2)
}

func get(c *http.Client, dev string) (string, error) {
	return tunneltest.Ask(c, "http://web/x", "X-Dev", dev)
}

// Two personal takeovers of one name and a caller without the header: each
// request reaches its own, over HTTP/1.1 keep-alive and over one h2c
// connection; an overlapping filter and a full takeover are refused; the
// first one out leaves the other's working; the last one out gives the
// name back.
func TestPersonalTakeoversRouteEachRequest(t *testing.T) {
	platform := tunneltest.NewPlatform()
	platform.AddWorkload("web:80", httpAnswer(t, "deployed"))
	addr, hostKey, _ := tunneltest.StartAgent(t, platform)
	ctx := ctxFor(t, 30*time.Second)
	sessions := map[string]*tunnel.Session{}
	signers := map[string]ssh.Signer{}
	for _, dev := range []string{"alice", "bob"} {
		signer, _ := newKey(t)
		signers[dev] = signer
		s, _ := connect(t, addr, hostKey, signer, tunnel.RunInfo{ID: "run-" + dev, Serves: true})
		served, err := s.ServeFiltered(ctx, "web", 80, httpAnswer(t, dev), xDevIs(dev))
		if err != nil || !served.TookOver {
			t.Fatalf("%s: ServeFiltered: %+v, %v", dev, served, err)
		}
		sessions[dev] = s
	}
	carol, _ := newKey(t)
	c, _ := connect(t, addr, hostKey, carol, tunnel.RunInfo{ID: "run-carol", Serves: true})
	if _, err := c.ServeFiltered(ctx, "web", 80, "127.0.0.1:1", tunnel.Filter{Headers: []tunnel.HeaderMatch{{Name: "X-Dev", Regex: "a.*"}}}); err == nil || !strings.Contains(err.Error(), "overlaps") {
		t.Errorf("an overlapping filter: %v", err)
	}
	if _, err := c.Serve(ctx, "web", 80, "127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "taken over personally") {
		t.Errorf("a full takeover over personal ones: %v", err)
	}

	for _, h2 := range []bool{false, true} {
		client := callerClient(platform, "web:80", h2)
		proto := map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"}[h2]
		for i := range 100 {
			for header, want := range map[string]string{"alice": "alice", "bob": "bob", "": "deployed", "mallory": "deployed"} {
				got, err := get(client, header)
				if err != nil || got != want+" "+proto {
					t.Fatalf("request %d with X-Dev %q over %s: %q, %v; want %q", i, header, proto, got, err, want+" "+proto)
				}
			}
		}
	}

	for _, dev := range []string{"alice", "bob"} {
		cfg := tunnel.ClientConfig{Addr: addr, User: "dev", Signer: signers[dev], HostKey: hostKey}
		clustertest.Eventually(t, clustertest.Settle, "plug who shows "+dev+"'s filter", func() error {
			runs, _, err := tunnel.Who(ctx, cfg)
			if err != nil {
				return err
			}
			var names []string
			for _, r := range runs {
				for _, n := range r.Names {
					names = append(names, n.Name+" "+n.Mode+" "+n.Filter)
				}
			}
			if got := strings.Join(names, "; "); got != "web parked header X-Dev="+dev {
				return fmt.Errorf("who shows %q", got)
			}
			return nil
		})
	}

	sessions["alice"].Close()
	client := callerClient(platform, "web:80", false)
	for header, want := range map[string]string{"alice": "deployed", "bob": "bob", "": "deployed"} {
		if got, err := get(client, header); err != nil || got != want+" HTTP/1.1" {
			t.Errorf("after alice left, X-Dev %q: %q, %v; want %q", header, got, err, want)
		}
	}
	if _, held := platform.Held("web"); !held {
		t.Fatal("web was given back while bob still takes it over")
	}
	sessions["bob"].Close()
	if _, held := platform.Held("web"); held {
		t.Error("web still held after the last personal takeover ended")
	}
}

// Filters overlap unless provably disjoint.
func TestFiltersOverlapUnlessProvablyDisjoint(t *testing.T) {
	h := func(specs ...string) tunnel.Filter {
		var f tunnel.Filter
		for _, s := range specs {
			if strings.HasPrefix(s, "/") {
				f.Path = s
				continue
			}
			m, err := tunnel.ParseHeaderMatch(s)
			if err != nil {
				t.Fatal(err)
			}
			f.Headers = append(f.Headers, m)
		}
		return f
	}
	cases := []struct {
		a, b    tunnel.Filter
		overlap bool
	}{
		{h("X-Dev=alice"), h("x-dev=bob"), false},
		{h("X-Dev=alice"), h("X-Dev=alice"), true},
		{h("X-Dev=alice"), h("X-Dev~b.*"), false},
		{h("X-Dev=alice"), h("X-Dev~a.*"), true},
		{h("X-Dev~a.*"), h("X-Dev~b.*"), true}, // two regexes: not proved disjoint
		{h("X-Dev=alice"), h("X-Team=shop"), true},
		{h("/api/"), h("/web/"), false},
		{h("/api"), h("/api/v2"), true},
		{h("/api"), h("X-Dev=alice"), true},
		{h("X-Dev=alice", "/api"), h("X-Dev=alice", "/web"), false},
	}
	for _, c := range cases {
		if got := c.a.Overlaps(c.b); got != c.overlap {
			t.Errorf("(%s) overlaps (%s): %v, want %v", c.a, c.b, got, c.overlap)
		}
		if got := c.b.Overlaps(c.a); got != c.overlap {
			t.Errorf("(%s) overlaps (%s): %v, want %v", c.b, c.a, got, c.overlap)
		}
	}
}

// What is not plain HTTP on a personally taken-over name: bytes that are
// not HTTP reach the deployed service as they are; a malformed or huge
// header is answered 400 or 431 by the agent; an HTTP/1.1 request that
// asks to upgrade to h2c is answered over HTTP/2, routed by its filter.
func TestPersonalTakeoverOfWhatIsNotPlainHTTP(t *testing.T) {
	platform := tunneltest.NewPlatform()
	platform.AddWorkload("web:80", httpAnswer(t, "deployed"))
	platform.AddWorkload("raw:80", echoServer(t, "deployed says "))
	addr, hostKey, _ := tunneltest.StartAgent(t, platform)
	ctx := ctxFor(t, 30*time.Second)
	signer, _ := newKey(t)
	s, _ := connect(t, addr, hostKey, signer, tunnel.RunInfo{ID: "run-alice", Serves: true})
	alice := tunnel.Filter{Headers: []tunnel.HeaderMatch{{Name: "X-Dev", Value: "alice"}}}
	for _, name := range []string{"web", "raw"} {
		if _, err := s.ServeFiltered(ctx, name, 80, httpAnswer(t, "alice"), alice); err != nil {
			t.Fatal(err)
		}
	}
	expectEcho(t, platformDial(platform, "raw:80"), "deployed says ")

	answer := func(request string) string {
		c, err := platform.DialContext(ctx, "tcp", "web:80")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		go io.WriteString(c, request)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		status := make([]byte, 12)
		io.ReadFull(c, status)
		return string(status)
	}
	if got := answer("GET / HTTP/1.1\r\nHost: web\r\nX-Big: " + strings.Repeat("a", 80<<10) + "\r\n\r\n"); got != "HTTP/1.1 431" {
		t.Errorf("a huge header: %q, want HTTP/1.1 431", got)
	}
	if got := answer("GET / HTTP/1.1\r\nHost: web\r\nno colon here\r\n\r\n"); got != "HTTP/1.1 400" {
		t.Errorf("a malformed header: %q, want HTTP/1.1 400", got)
	}

	for dev, want := range map[string]string{"alice": "alice HTTP/2.0", "bob": "deployed HTTP/2.0"} {
		c, err := platform.DialContext(ctx, "tcp", "web:80")
		if err != nil {
			t.Fatal(err)
		}
		if got, err := tunneltest.H2CUpgrade(c, "X-Dev", dev); err != nil || got != want {
			t.Errorf("h2c upgrade with X-Dev %s: body %q, %v; want %q", dev, got, err, want)
		}
	}
}

// An agent whose platform does not keep the deployed service running
// during a takeover (Swarm; here the in-memory one) refuses a personal
// takeover, saying why, and serves nothing; so does one of a name nothing
// deployed answers.
func TestPersonalTakeoverNeedsADeployedServiceThatKeepsRunning(t *testing.T) {
	ctx := ctxFor(t, 20*time.Second)
	mem := memplatform.New()
	addr, hostKey, _ := tunneltest.StartAgent(t, mem)
	signer, _ := newKey(t)
	s, _ := connect(t, addr, hostKey, signer, tunnel.RunInfo{ID: "run-1", Serves: true})
	if _, err := s.ServeFiltered(ctx, "web", 80, "127.0.0.1:1", xDevIs("alice")); err == nil || !strings.Contains(err.Error(), "does not keep running") {
		t.Errorf("a personal takeover on the in-memory platform: %v", err)
	}
	if _, held := mem.Held("web"); held {
		t.Error("web is served after the refusal")
	}

	platform := tunneltest.NewPlatform()
	addr, hostKey, _ = tunneltest.StartAgent(t, platform)
	s, _ = connect(t, addr, hostKey, signer, tunnel.RunInfo{ID: "run-2", Serves: true})
	if _, err := s.ServeFiltered(ctx, "fresh", 80, "127.0.0.1:1", xDevIs("alice")); err == nil || !strings.Contains(err.Error(), "needs a deployed Service") {
		t.Errorf("a personal takeover of a new name: %v", err)
	}
	if _, held := platform.Held("fresh"); held {
		t.Error("fresh is served after the refusal")
	}
}

func xDevIs(dev string) tunnel.Filter {
	return tunnel.Filter{Headers: []tunnel.HeaderMatch{{Name: "X-Dev", Value: dev}}}
}

// An h2c upgrade of a request with a body is answered in HTTP/1.1, and
// the upgrade goes no further.
func TestAnH2CUpgradeWithABodyIsAnsweredInHTTP1(t *testing.T) {
	platform := tunneltest.NewPlatform()
	platform.AddWorkload("web:80", httpAnswer(t, "deployed"))
	addr, hostKey, _ := tunneltest.StartAgent(t, platform)
	ctx := ctxFor(t, 20*time.Second)
	signer, _ := newKey(t)
	s, _ := connect(t, addr, hostKey, signer, tunnel.RunInfo{ID: "run-alice", Serves: true})
	if _, err := s.ServeFiltered(ctx, "web", 80, httpAnswer(t, "alice"), xDevIs("alice")); err != nil {
		t.Fatal(err)
	}
	for dev, want := range map[string]string{"alice": "alice HTTP/1.1", "bob": "deployed HTTP/1.1"} {
		req, _ := http.NewRequest("POST", "http://web/", strings.NewReader("a body"))
		req.Header.Set("X-Dev", dev)
		req.Header.Set("Connection", "Upgrade, HTTP2-Settings")
		req.Header.Set("Upgrade", "h2c")
		req.Header.Set("HTTP2-Settings", "AAMAAABkAAQAoAAAAAIAAAAA")
		resp, err := callerClient(platform, "web:80", false).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != want {
			t.Errorf("X-Dev %s: %s %q, want 200 %q", dev, resp.Status, body, want)
		}
	}
}
