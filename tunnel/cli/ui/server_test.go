package ui

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"plug/tunnel"
)

// fakeAgent answers as an agent would, and records the changes asked.
type fakeAgent struct {
	mu      sync.Mutex
	runs    []tunnel.Plugged
	changes []string
	query   tunnel.AuditQuery
}

func (f *fakeAgent) Who(context.Context) ([]tunnel.Plugged, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]tunnel.Plugged(nil), f.runs...), true, nil
}

func (f *fakeAgent) End(_ context.Context, run, reason string) (tunnel.Ended, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.changes = append(f.changes, "end "+run+" "+reason)
	return tunnel.Ended{Run: run, User: "alice", Key: "SHA256:a"}, nil
}

func (f *fakeAgent) Members(_ context.Context, op, key, reason string) (tunnel.MemberList, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if op != "list" {
		f.changes = append(f.changes, op+" "+key)
	}
	return tunnel.MemberList{}, "done", nil
}

func (f *fakeAgent) Status(context.Context) (*tunnel.Diagnosis, error) {
	return &tunnel.Diagnosis{AgentVersion: "dev", Status: &tunnel.AgentStatus{Version: "dev", Admission: tunnel.AdmissionInvite}}, nil
}

func (f *fakeAgent) SearchAudit(_ context.Context, q tunnel.AuditQuery) ([]tunnel.AuditEvent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.query = q
	return []tunnel.AuditEvent{{Event: tunnel.AuditRunOpened, Run: "run123"}}, nil
}

func (f *fakeAgent) changed() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.changes...)
}

// serve starts the page of f on a loopback port; it returns its server
// and base address.
func serve(t *testing.T, f *fakeAgent) (*Server, string) {
	t.Helper()
	s, err := New(f, Info{Profile: "test", Host: "agent.example", Port: 32222, HostKey: "SHA256:host"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Serve(ctx, l)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return s, "http://" + l.Addr().String()
}

// do sends one request to base with the headers given; host, when set,
// replaces the Host header.
func do(t *testing.T, method, url, host string, headers map[string]string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestChangesNeedTokenOriginAndHost(t *testing.T) {
	f := &fakeAgent{}
	s, base := serve(t, f)
	host := strings.TrimPrefix(base, "http://")
	good := map[string]string{"X-Plug-Token": s.token, "Origin": base, "Content-Type": "application/json"}
	with := func(k, v string) map[string]string {
		h := map[string]string{}
		for a, b := range good {
			h[a] = b
		}
		if v == "" {
			delete(h, k)
		} else {
			h[k] = v
		}
		return h
	}
	end := `{"run":"abcdef12","reason":"lunch"}`
	refused := []struct {
		name    string
		host    string
		headers map[string]string
		want    int
	}{
		{"no token", "", with("X-Plug-Token", ""), http.StatusUnauthorized},
		{"another token", "", with("X-Plug-Token", "x"+s.token), http.StatusUnauthorized},
		{"a foreign Origin", "", with("Origin", "http://evil.example"), http.StatusForbidden},
		{"no Origin", "", with("Origin", ""), http.StatusForbidden},
		{"a foreign Host (DNS rebinding)", "evil.example:" + strings.Split(host, ":")[1], with("Origin", ""), http.StatusMisdirectedRequest},
		{"a cross-site fetch", "", with("Sec-Fetch-Site", "cross-site"), http.StatusForbidden},
		{"a form's body", "", with("Content-Type", "application/x-www-form-urlencoded"), http.StatusUnsupportedMediaType},
	}
	for _, r := range refused {
		for _, path := range []string{"/api/end", "/api/members"} {
			code, body := do(t, "POST", base+path, r.host, r.headers, end)
			if code != r.want {
				t.Errorf("POST %s with %s: %d %q, want %d", path, r.name, code, body, r.want)
			}
		}
	}
	if code, _ := do(t, "GET", base+"/api/end?token="+s.token, "", nil, ""); code != http.StatusNotFound {
		t.Errorf("GET /api/end with the token: %d, want 404: changes are POSTs only", code)
	}
	if got := f.changed(); len(got) != 0 {
		t.Fatalf("refused requests changed %q", got)
	}
	code, body := do(t, "POST", base+"/api/end", "", good, end)
	if code != http.StatusOK || !strings.Contains(body, "ended run abcdef12") {
		t.Fatalf("POST /api/end with the token and the page's Origin: %d %q", code, body)
	}
	code, _ = do(t, "POST", base+"/api/members", "localhost:"+strings.Split(host, ":")[1],
		with("Origin", "http://localhost:"+strings.Split(host, ":")[1]), `{"op":"accept","key":"SHA256:k"}`)
	if code != http.StatusOK {
		t.Fatalf("POST /api/members at localhost: %d", code)
	}
	if got := f.changed(); len(got) != 2 || got[0] != "end abcdef12 lunch" || got[1] != "accept SHA256:k" {
		t.Fatalf("changes = %q", got)
	}
}

func TestDataNeedsToken(t *testing.T) {
	f := &fakeAgent{}
	s, base := serve(t, f)
	for _, path := range []string{"/api/audit", "/api/events"} {
		if code, _ := do(t, "GET", base+path, "", nil, ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d, want 401", path, code)
		}
	}
	code, body := do(t, "GET", base+"/api/audit?token="+s.token+"&name=checkout&since=2026-12-01T15:00:00Z", "", nil, "")
	if code != http.StatusOK || !strings.Contains(body, "run123") {
		t.Fatalf("GET /api/audit: %d %q", code, body)
	}
	if f.query.Name != "checkout" || !f.query.Since.Equal(time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)) {
		t.Fatalf("query = %+v", f.query)
	}
	if code, _ := do(t, "GET", base+"/api/audit?token="+s.token+"&since=tuesday", "", nil, ""); code != http.StatusBadRequest {
		t.Errorf("a since that is not a time: %d, want 400", code)
	}
}

func TestPageIsEmbeddedWithStrictPolicy(t *testing.T) {
	_, base := serve(t, &fakeAgent{})
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `<script src="app.js"`) || strings.Contains(string(b), "<script>") || strings.Contains(string(b), "style=") {
		t.Fatalf("the page has inline script or style, or no app.js:\n%s", b)
	}
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) || strings.Contains(csp, "unsafe-inline") {
			t.Errorf("Content-Security-Policy %q lacks %q or allows inline", csp, want)
		}
	}
	for _, asset := range []string{"/app.js", "/style.css"} {
		if r, err := http.Get(base + asset); err != nil || r.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %v %v", asset, r, err)
		}
	}
}

func TestEventsStreamRuns(t *testing.T) {
	f := &fakeAgent{}
	s, base := serve(t, f)
	resp, err := http.Get(base + "/api/events?token=" + s.token)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	r := bufio.NewReader(resp.Body)
	next := func() state {
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				var st state
				if err := json.Unmarshal([]byte(data), &st); err != nil {
					t.Fatal(err)
				}
				return st
			}
		}
	}
	if st := next(); len(st.Runs) != 0 || st.Info.Profile != "test" || len(st.Install) != 3 {
		t.Fatalf("first state: %+v", st)
	}
	f.mu.Lock()
	f.runs = []tunnel.Plugged{{Run: "run1", User: "bob", Names: []tunnel.RecordName{{Name: "checkout", Port: 80, Mode: tunnel.ModeParked}}}}
	f.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if st := next(); len(st.Runs) == 1 && st.Runs[0].Names[0].Name == "checkout" {
			if !strings.Contains(st.Install[2].Command, "install-windows | bash -s -- --fingerprint SHA256:host agent.example 32222") {
				t.Fatalf("Windows install: %q", st.Install[2].Command)
			}
			return
		}
	}
	t.Fatal("the new run was not streamed within 10 s")
}
