package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestServeAnswersNameAndLogsRequests(t *testing.T) {
	srv := httptest.NewServer(handler("web-1", "", &requestLog{}))
	defer srv.Close()

	var out strings.Builder
	if err := getEach(&out, srv.URL+"/hello", 3, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "web-1\nweb-1\nweb-1\n"; got != want {
		t.Fatalf("get printed %q, want %q", got, want)
	}
	resp, err := http.Get(srv.URL + "/log")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[0], " /hello") {
		t.Fatalf("/log = %q, want 3 lines ending in /hello", body)
	}
}

func TestGetUsesANewConnectionPerRequest(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(handler("x", "", &requestLog{}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()

	if err := getEach(io.Discard, srv.URL, 5, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := conns.Load(); n != 5 {
		t.Fatalf("5 requests used %d connections, want 5", n)
	}
}

func TestGetFailsOnErrorStatus(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	if err := getEach(io.Discard, srv.URL, 1, time.Second); err == nil {
		t.Fatal("get of a 404 succeeded, want an error")
	}
}

func TestWhoamiNamesTheProcessIdentity(t *testing.T) {
	srv := httptest.NewServer(handler("x", "", &requestLog{}))
	defer srv.Close()
	var out strings.Builder
	if err := getEach(&out, srv.URL+"/whoami", 1, time.Second); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("uid=%d\ngid=%d\n", os.Getuid(), os.Getgid())
	if !strings.HasPrefix(out.String(), want) || !strings.Contains(out.String(), "capeff=") {
		t.Fatalf("/whoami = %q, want it to start with %q and name capeff", out.String(), want)
	}
}

func TestServeWithUpstreamShowsWhoAnswersIt(t *testing.T) {
	api := httptest.NewServer(handler("api (deployed)", "", &requestLog{}))
	web := httptest.NewServer(handler("web", api.URL, &requestLog{}))
	defer web.Close()

	var out strings.Builder
	if err := getEach(&out, web.URL, 1, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "web -> api (deployed)\n"; got != want {
		t.Fatalf("web answered %q, want %q", got, want)
	}

	api.Close()
	out.Reset()
	if err := getEach(&out, web.URL, 1, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "web -> error: ") {
		t.Fatalf("with its upstream gone, web answered %q, want the error", out.String())
	}
}

func TestEnvPrintsEveryVariable(t *testing.T) {
	t.Setenv("WORKLOAD_TEST_VALUE", "two\nlines")
	var lines, nul strings.Builder
	if err := printEnv(&lines, nil); err != nil {
		t.Fatal(err)
	}
	if err := printEnv(&nul, []string{"-0"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(lines.String(), "\nWORKLOAD_TEST_VALUE=two\nlines\n") && !strings.HasPrefix(lines.String(), "WORKLOAD_TEST_VALUE=two\nlines\n") {
		t.Errorf("env does not print the variable:\n%s", lines.String())
	}
	found := false
	for _, kv := range strings.Split(nul.String(), "\x00") {
		found = found || kv == "WORKLOAD_TEST_VALUE=two\nlines"
	}
	if !found || !strings.HasSuffix(nul.String(), "\x00") {
		t.Errorf("env -0 does not end each variable with NUL: %q", nul.String())
	}
}

// call's two streams each report every request: on "new" each on a
// connection of its own, on "keep" all on one; a request that fails is a
// line saying so.
func TestCallReportsEachRequestOfBothStreams(t *testing.T) {
	// Both streams call until the server has answered 40 requests, 20 with
	// web-1 and 20 with a 503, however busy the machine is.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var served atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := served.Add(1)
		if n >= 40 {
			cancel()
		}
		if n > 20 {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "web-1")
	}))
	defer srv.Close()
	var out strings.Builder
	lw := &lineWriter{w: &out}
	kept := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	done := make(chan struct{})
	go func() { callEvery(ctx, lw, "keep", kept, srv.URL, 10*time.Millisecond); close(done) }()
	callEvery(ctx, lw, "new", fresh, srv.URL, 10*time.Millisecond)
	<-done
	ports := map[string]map[string]bool{"new": {}, "keep": {}}
	fails := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			t.Fatalf("line %q", line)
		}
		if f[2] == "fail" {
			fails[f[1]]++
			continue
		}
		if f[3] != "web-1" || !strings.HasPrefix(f[4], "conn=") {
			t.Fatalf("line %q", line)
		}
		ports[f[1]][f[4]] = true
	}
	if len(ports["keep"]) != 1 || len(ports["new"]) < 5 {
		t.Errorf("connections: keep %d, new %d; want 1 and one per request", len(ports["keep"]), len(ports["new"]))
	}
	if fails["new"] == 0 || fails["keep"] == 0 {
		t.Errorf("failures %v: the 503s are not reported", fails)
	}
}
