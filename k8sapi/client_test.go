package k8sapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"plug/tunnel/clustertest"
)

// serverClient returns a Client for an httptest server answering with h.
func serverClient(t *testing.T, h http.HandlerFunc) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := New(Config{Server: srv.URL, Token: func() (string, error) { return "t0k", nil }})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func writeStatus(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(Status{Status: "Failure", Code: code, Reason: reason, Message: msg})
}

func TestFailuresAreDecodedFromStatus(t *testing.T) {
	cases := []struct {
		code   int
		reason string
		body   string // a body that is not a Status, when set
		is     func(error) bool
		isName string
	}{
		{404, "NotFound", "", IsNotFound, "IsNotFound"},
		{409, "Conflict", "", IsConflict, "IsConflict"},
		{409, "AlreadyExists", "", IsAlreadyExists, "IsAlreadyExists"},
		{403, "Forbidden", "", IsForbidden, "IsForbidden"},
		{410, "Expired", "", IsGone, "IsGone"},
		{422, "Invalid", "", IsInvalid, "IsInvalid"},
		{403, "", "<html>denied by a proxy</html>", IsForbidden, "IsForbidden"},
	}
	for _, tc := range cases {
		c := serverClient(t, func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer t0k" {
				t.Errorf("request without the bearer token: %q", r.Header.Get("Authorization"))
			}
			if tc.body != "" {
				w.WriteHeader(tc.code)
				io.WriteString(w, tc.body)
				return
			}
			writeStatus(w, tc.code, tc.reason, "services \"web\" says "+tc.reason)
		})
		_, err := c.Services("ns").Get(context.Background(), "web")
		var api *APIError
		if !errors.As(err, &api) || api.Code != tc.code || !tc.is(err) {
			t.Errorf("%d %s: got %v, want an *APIError that %s", tc.code, tc.reason, err, tc.isName)
			continue
		}
		if IsConflict(err) && tc.reason == "AlreadyExists" {
			t.Errorf("AlreadyExists must not count as a Conflict")
		}
		if !strings.Contains(err.Error(), "/api/v1/namespaces/ns/services/web") {
			t.Errorf("error %q does not name the request", err)
		}
		if IsTemporary(err) {
			t.Errorf("%d %s counted as temporary", tc.code, tc.reason)
		}
	}
}

func TestTemporaryFailures(t *testing.T) {
	c := serverClient(t, func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, 503, "ServiceUnavailable", "etcd is down")
	})
	_, err := c.Services("ns").Get(context.Background(), "web")
	if !IsTemporary(err) {
		t.Fatalf("503: IsTemporary false for %v", err)
	}
	unreachable, _ := New(Config{Server: "http://127.0.0.1:1"})
	_, err = unreachable.Services("ns").Get(context.Background(), "web")
	if err == nil || !IsTemporary(err) {
		t.Fatalf("refused connection: IsTemporary false for %v", err)
	}
}

func TestRetryOnConflictRereadsAndWritesAgain(t *testing.T) {
	var version atomic.Int32 // the object's resourceVersion on the server
	version.Store(1)
	var writes atomic.Int32
	c := serverClient(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
			fmt.Fprintf(w, `{"metadata":{"name":"web","resourceVersion":"%d"}}`, version.Load())
		case http.MethodPatch:
			if ct := r.Header.Get("Content-Type"); ct != "application/merge-patch+json" {
				t.Errorf("patch content type %q", ct)
			}
			var patch struct {
				Metadata ObjectMeta `json:"metadata"`
			}
			json.NewDecoder(r.Body).Decode(&patch)
			n := writes.Add(1)
			if n == 1 {
				version.Add(1) // somebody else wrote in between our read and write
			}
			if patch.Metadata.ResourceVersion != fmt.Sprint(version.Load()) {
				writeStatus(w, 409, "Conflict", "the object has been modified; please apply your changes to the latest version and try again")
				return
			}
			version.Add(1)
			fmt.Fprintf(w, `{"metadata":{"name":"web","resourceVersion":"%d"}}`, version.Load())
		}
	})
	svc := c.Services("ns")
	attempts := 0
	err := RetryOnConflict(context.Background(), func() error {
		attempts++
		cur, err := svc.Get(context.Background(), "web")
		if err != nil {
			return err
		}
		_, err = svc.MergePatch(context.Background(), "web", map[string]any{
			"metadata": map[string]any{"resourceVersion": cur.Metadata.ResourceVersion},
		})
		return err
	})
	if err != nil || attempts != 2 {
		t.Fatalf("RetryOnConflict: err %v after %d attempts, want success on the 2nd", err, attempts)
	}

	// A conflict that never clears ends with the conflict, not forever.
	attempts = 0
	err = RetryOnConflict(context.Background(), func() error {
		attempts++
		return &APIError{Code: 409, Reason: ReasonConflict}
	})
	if !IsConflict(err) || attempts != 8 {
		t.Fatalf("endless conflict: %v after %d attempts", err, attempts)
	}
}

func TestJSONPatchKeepsZeroValues(t *testing.T) {
	got, _ := json.Marshal([]PatchOp{
		{Op: "remove", Path: "/spec/selector"},
		{Op: "add", Path: "/metadata/annotations/" + PointerEscape("plug.dev/x"), Value: ""},
	})
	want := `[{"op":"remove","path":"/spec/selector"},{"op":"add","path":"/metadata/annotations/plug.dev~1x","value":""}]`
	if string(got) != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
}

// watchServer serves a list and watches of services, as scripted by the test.
type watchServer struct {
	t       *testing.T
	lists   atomic.Int32
	watches chan string // resourceVersion each watch asked for
	script  func(n int, rv string, w http.ResponseWriter)
	count   atomic.Int32
}

func (s *watchServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("watch") != "true" {
		n := s.lists.Add(1)
		fmt.Fprintf(w, `{"metadata":{"resourceVersion":"%d0"},"items":[{"metadata":{"name":"list%d"}}]}`, n, n)
		return
	}
	rv := r.URL.Query().Get("resourceVersion")
	select {
	case s.watches <- rv:
	default: // the test has seen enough
	}
	s.script(int(s.count.Add(1)), rv, w)
}

func event(w http.ResponseWriter, typ, name, rv string) {
	fmt.Fprintf(w, `{"type":%q,"object":{"metadata":{"name":%q,"resourceVersion":%q}}}`+"\n", typ, name, rv)
	w.(http.Flusher).Flush()
}

func TestFollowResumesAndRelistsOnGone(t *testing.T) {
	ws := &watchServer{t: t, watches: make(chan string, 10)}
	ws.script = func(n int, rv string, w http.ResponseWriter) {
		switch n {
		case 1: // two events, then the server ends the watch
			event(w, "ADDED", "a", "11")
			event(w, "BOOKMARK", "", "12")
		case 2: // resumed at 12: one event, then the history is gone
			event(w, "MODIFIED", "a", "13")
			fmt.Fprint(w, `{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old resource version: 13 (20)"}}`+"\n")
		case 3: // after the relist
			event(w, "DELETED", "a", "21")
		default: // the watch a client must not start fresh: answer 410 at once
			writeStatus(w, 410, "Gone", "too old")
		}
	}
	c := serverClient(t, ws.ServeHTTP)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var seen []string
	done := make(chan error, 1)
	go func() {
		done <- c.Services("ns").Follow(ctx, ListOptions{}, 10*time.Millisecond, Handler[Service]{
			Synced:  func(items []Service) { seen = append(seen, "sync:"+items[0].Metadata.Name) },
			Changed: func(ev Event[Service]) { seen = append(seen, string(ev.Type)+":"+ev.Object.Metadata.Name) },
		})
	}()
	var rvs []string
	for len(rvs) < 4 {
		select {
		case rv := <-ws.watches:
			rvs = append(rvs, rv)
		case <-time.After(clustertest.Settle):
			t.Fatalf("watches started so far from %v; want 4", rvs)
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Follow ended with %v, want context.Canceled", err)
	}
	// 10: from the first list; 12: resumed after the bookmark; 20: after the
	// relist that the 410 forced; 21: resumed after the delete.
	if want := []string{"10", "12", "20", "21"}; strings.Join(rvs, ",") != strings.Join(want, ",") {
		t.Errorf("watches started from %v, want %v", rvs, want)
	}
	want := "sync:list1 ADDED:a MODIFIED:a sync:list2 DELETED:a"
	if got := strings.Join(seen, " "); !strings.HasPrefix(got, want) {
		t.Errorf("handler saw %q, want it to start with %q", got, want)
	}
}

func TestFollowStopsWhenForbidden(t *testing.T) {
	c := serverClient(t, func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, 403, "Forbidden", `pods is forbidden: User "system:serviceaccount:plug:plug" cannot list resource "pods"`)
	})
	err := c.Pods("plug").Follow(context.Background(), ListOptions{}, time.Millisecond, Handler[Pod]{})
	if !IsForbidden(err) {
		t.Fatalf("Follow = %v, want the Forbidden error", err)
	}
}
