package main

import (
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
