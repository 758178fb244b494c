package swarmapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakeEngine serves handler as an engine answering /version with apiVersion
// and minVersion, and returns a client for it.
func fakeEngine(t *testing.T, apiVersion, minVersion string, handler http.HandlerFunc) *Client {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(Version{Version: "test", APIVersion: apiVersion, MinAPIVersion: minVersion})
	})
	if handler != nil {
		mux.HandleFunc("/", handler)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return newClient("/fake/docker.sock", func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", srv.Listener.Addr().String())
	})
}

func engineError(w http.ResponseWriter, status int, msg string) {
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"message":%q}`, msg)
}

func TestErrorsAreTypedFromTheEngineMessage(t *testing.T) {
	cases := []struct {
		status int
		body   string
		check  func(error) bool
		want   string
	}{
		{404, `{"message":"service web not found"}`, IsNotFound, "service web not found"},
		{409, `{"message":"name conflicts with an existing object"}`, IsConflict, "name conflicts"},
		{500, `{"message":"rpc error: code = Unknown desc = update out of sequence"}`, IsOutOfSequence, "update out of sequence"},
		{500, "plain text failure\n", func(err error) bool { return !IsNotFound(err) && !IsConflict(err) }, "plain text failure"},
	}
	for _, tc := range cases {
		c := fakeEngine(t, "1.41", "1.12", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(tc.status)
			io.WriteString(w, tc.body)
		})
		_, err := c.Service(context.Background(), "web")
		var e *Error
		if !errors.As(err, &e) || e.Status != tc.status || !tc.check(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("answer %d %s: got %v", tc.status, tc.body, err)
		}
	}
}

func TestVersionNegotiation(t *testing.T) {
	cases := []struct {
		api, min string
		use      string // the path prefix expected, or "" when refused
		refusal  string
	}{
		{"1.41", "1.12", "/v1.41/", ""},
		{"1.45", "1.24", "/v1.45/", ""},
		{"1.60", "1.44", "/v" + MaxAPIVersion + "/", ""},
		{"1.40", "1.12", "", "Docker 20.10 or newer"},
		{"1.70", "1.60", "", "update the agent's image to a plug release"},
		{"", "", "", "did not say which API version"},
	}
	for _, tc := range cases {
		var got string
		c := fakeEngine(t, tc.api, tc.min, func(w http.ResponseWriter, r *http.Request) {
			got = r.URL.Path
			io.WriteString(w, `{}`)
		})
		_, err := c.Info(context.Background())
		if tc.use != "" {
			if err != nil || !strings.HasPrefix(got, tc.use) {
				t.Errorf("engine %s (oldest %s): asked %q, err %v; want prefix %s", tc.api, tc.min, got, err, tc.use)
			}
			continue
		}
		var ve *VersionError
		if !errors.As(err, &ve) || !strings.Contains(err.Error(), tc.refusal) || got != "" {
			t.Errorf("engine %s (oldest %s): got %v after asking %q; want a refusal saying %q before any call", tc.api, tc.min, err, got, tc.refusal)
		}
	}
}

func TestVersionNegotiationRetriesAfterATransientFailure(t *testing.T) {
	fail := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/version" && fail {
			fail = false
			engineError(w, 500, "starting")
			return
		}
		io.WriteString(w, `{"ApiVersion":"1.41","MinAPIVersion":"1.12"}`)
	}))
	defer srv.Close()
	c := newClient("/fake", func(ctx context.Context) (net.Conn, error) {
		return net.Dial("tcp", srv.Listener.Addr().String())
	})
	if _, err := c.APIVersion(context.Background()); err == nil {
		t.Fatal("the first negotiation should fail")
	}
	if v, err := c.APIVersion(context.Background()); err != nil || v != "1.41" {
		t.Fatalf("second negotiation: %q, %v", v, err)
	}
}

// updateEngine is a fake engine holding one service whose version moves on
// every update, and which another writer updates racesLeft times just
// before plug's update arrives.
type updateEngine struct {
	mu        sync.Mutex
	version   uint64
	spec      string
	racesLeft int
	posts     []string // the version query of each update plug sent
}

func (e *updateEngine) handle(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case r.Method == "GET":
		fmt.Fprintf(w, `{"ID":"svc1","Version":{"Index":%d},"Spec":%s}`, e.version, e.spec)
	case r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/services/svc1/update"):
		e.posts = append(e.posts, r.URL.Query().Get("version"))
		if e.racesLeft > 0 {
			e.racesLeft--
			e.version++ // somebody else got there first
		}
		if r.URL.Query().Get("version") != fmt.Sprint(e.version) {
			engineError(w, 500, "rpc error: code = Unknown desc = update out of sequence")
			return
		}
		b, _ := io.ReadAll(r.Body)
		e.spec = string(b)
		e.version++
		io.WriteString(w, `{"Warnings":null}`)
	default:
		engineError(w, 404, "no such thing")
	}
}

func TestUpdateServiceRetriesWhenAnotherWriterWins(t *testing.T) {
	// A field plug does not know, with a number float64 would round.
	e := &updateEngine{version: 10, racesLeft: 2, spec: `{"Name":"web","Labels":{},"Unknown":{"Big":12345678901234567},"Mode":{"Replicated":{"Replicas":2}}}`}
	c := fakeEngine(t, "1.41", "1.12", e.handle)
	calls := 0
	err := c.UpdateService(context.Background(), "svc1", func(s *Service, spec RawSpec) error {
		calls++
		spec.SetLabel("plug.test", "yes")
		return spec.Set(json.RawMessage(`{"Replicated":{"Replicas":0}}`), "Mode")
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 3 || strings.Join(e.posts, ",") != "10,11,12" {
		t.Errorf("change called %d times, updates sent at versions %v; want 3 at 10,11,12", calls, e.posts)
	}
	var got map[string]any
	dec := json.NewDecoder(strings.NewReader(e.spec))
	dec.UseNumber()
	dec.Decode(&got)
	if fmt.Sprint(got["Unknown"]) != "map[Big:12345678901234567]" || fmt.Sprint(got["Labels"]) != "map[plug.test:yes]" ||
		fmt.Sprint(got["Mode"]) != "map[Replicated:map[Replicas:0]]" {
		t.Errorf("spec sent: %s", e.spec)
	}
}

func TestUpdateServiceGivesUpAfterItsAttempts(t *testing.T) {
	e := &updateEngine{version: 1, racesLeft: 1000, spec: `{"Name":"web"}`}
	c := fakeEngine(t, "1.41", "1.12", e.handle)
	err := c.UpdateService(context.Background(), "svc1", func(*Service, RawSpec) error { return nil })
	if !IsOutOfSequence(err) || !strings.Contains(err.Error(), "kept changing") || len(e.posts) != updateAttempts {
		t.Fatalf("got %v after %d updates", err, len(e.posts))
	}
}

func TestUpdateServiceSendsNothingWhenChangeSaysNoUpdate(t *testing.T) {
	e := &updateEngine{version: 1, spec: `{"Name":"web"}`}
	c := fakeEngine(t, "1.41", "1.12", e.handle)
	err := c.UpdateService(context.Background(), "svc1", func(*Service, RawSpec) error { return ErrNoUpdate })
	if err != nil || len(e.posts) != 0 {
		t.Fatalf("got %v with %d updates sent", err, len(e.posts))
	}
}

func TestSocketErrorsSayWhatToDo(t *testing.T) {
	dir := t.TempDir()
	denied := newClient(filepath.Join(dir, "docker.sock"), func(context.Context) (net.Conn, error) {
		// What connect(2) answers a user outside the socket's group.
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.EACCES)}
	})
	missing := NewClient(filepath.Join(dir, "nothing-here.sock"))
	ln, err := net.Listen("unix", filepath.Join(dir, "closed.sock"))
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	refused := NewClient(filepath.Join(dir, "closed.sock"))

	for _, tc := range []struct {
		c    *Client
		want string
	}{
		{denied, "no permission to use the Docker socket"},
		{missing, "no Docker socket at"},
		{refused, "nothing listens on the Docker socket"},
	} {
		_, err := tc.c.Info(context.Background())
		var se *SocketError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v; want a SocketError saying %q", tc.c.Socket(), err, tc.want)
		}
	}
}

func TestNewClientFromEnvRefusesWhatIsNotAUnixSocket(t *testing.T) {
	t.Setenv("DOCKER_HOST", "tcp://10.0.0.1:2376")
	if _, err := NewClientFromEnv(); err == nil || !strings.Contains(err.Error(), "unix socket only") {
		t.Fatalf("got %v", err)
	}
	t.Setenv("DOCKER_HOST", "unix:///run/other.sock")
	if c, err := NewClientFromEnv(); err != nil || c.Socket() != "/run/other.sock" {
		t.Fatalf("got %v", err)
	}
}

// StopContainer asks the engine to stop with the grace in whole seconds;
// a container stopped already (304) or gone (404) is no error, a refusal
// is.
func TestStopContainer(t *testing.T) {
	for status, wantErr := range map[int]bool{204: false, 304: false, 404: false, 500: true} {
		var asked string
		c := fakeEngine(t, "1.41", "1.12", func(w http.ResponseWriter, r *http.Request) {
			asked = r.Method + " " + r.URL.Path + "?" + r.URL.RawQuery
			if status == 500 {
				engineError(w, status, "cannot stop")
				return
			}
			w.WriteHeader(status)
		})
		err := c.StopContainer(context.Background(), "abc", 2*time.Second)
		if (err != nil) != wantErr || !strings.HasSuffix(asked, "/containers/abc/stop?t=2") || !strings.HasPrefix(asked, "POST ") {
			t.Errorf("status %d: asked %q, error %v", status, asked, err)
		}
	}
}
