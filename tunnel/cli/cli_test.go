package cli

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"plug/keys"
	"plug/tunnel"
	"plug/tunnel/tunneltest"
)

// home is a ~/.plug for one test, with PLUG_HOME pointing at it.
type home struct {
	t       *testing.T
	store   keys.Store
	hostKey string // an agent host key, authorized_keys form
	host    string // where profiles point: a tripwire
	port    int
}

func newHome(t *testing.T) *home {
	t.Helper()
	dir := filepath.Join(t.TempDir(), ".plug")
	t.Setenv("PLUG_HOME", dir)
	agentKeys := keys.Open(t.TempDir())
	pub, err := agentKeys.GenerateKey("agent", "", false)
	if err != nil {
		t.Fatal(err)
	}
	h := &home{t: t, store: keys.Open(dir), hostKey: keys.AuthorizedKey(pub)}
	h.host, h.port = tripwire(t)
	return h
}

// tripwire listens on loopback and fails the test if anything connects:
// profiles of runs that must be refused point at it.
func tripwire(t *testing.T) (string, int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Errorf("a refused command connected to the agent's address")
			c.Close()
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	a := l.Addr().(*net.TCPAddr)
	return a.IP.String(), a.Port
}

// profile adds a profile pointing at the tripwire, with a key pair if
// withKey.
func (h *home) profile(name string, withKey bool) {
	h.t.Helper()
	p := keys.Profile{Name: name, Host: h.host, Port: h.port, HostKey: h.hostKey}
	if err := h.store.AddProfile(p, false); err != nil {
		h.t.Fatal(err)
	}
	if withKey {
		if _, err := h.store.GenerateKey(name, "dev@test", false); err != nil {
			h.t.Fatal(err)
		}
	}
}

// plug runs the CLI in-process and returns its exit code and output.
func plug(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	c := newCLI(strings.NewReader(""), &out, &errOut)
	code = c.main(args)
	return code, out.String(), errOut.String()
}

func TestRunRefusesBadInputBeforeContactingAnything(t *testing.T) {
	cases := []struct {
		name     string
		profiles map[string]bool // name → has a key pair
		args     []string
		want     []string // all in stderr
	}{
		{"port 0", map[string]bool{"prod": true}, []string{"-s", "web:0:3000", "--", "true"},
			[]string{"CLUSTERPORT 0 is not between 1 and 65535", "NAME:CLUSTERPORT:LOCALPORT", "e.g. -s web:8080:3000"}},
		{"port too big", map[string]bool{"prod": true}, []string{"-s", "web:80:65536", "true"},
			[]string{"LOCALPORT 65536", "e.g. -s web:8080:3000"}},
		{"missing part", map[string]bool{"prod": true}, []string{"-s", "web:80", "true"},
			[]string{"2 part(s)", "e.g. -s web:8080:3000"}},
		{"not a DNS-1035 label", map[string]bool{"prod": true}, []string{"-s", "Web_1:80:3000", "true"},
			[]string{`NAME "Web_1"`, "starts with a letter", "e.g. -s web:8080:3000"}},
		{"two -s for one name", map[string]bool{"prod": true}, []string{"-s", "web:80:3000", "-s", "web:81:3001", "true"},
			[]string{"two -s for web", "e.g. -s web:80:3000"}},
		{"two -s for one name, one with a profile", map[string]bool{"a": true, "b": true},
			[]string{"-p", "a", "-p", "b", "-s", "web:80:3000", "-s", "b/web:81:3001", "true"},
			[]string{"two -s for web in profile b"}},
		{"unknown profile", map[string]bool{"prod": true}, []string{"-p", "staging", "-s", "web:80:3000", "true"},
			[]string{`no profile "staging"`, "prod", "plug ls"}},
		{"bad profile name", map[string]bool{"prod": true}, []string{"-p", "../x", "-s", "web:80:3000", "true"},
			[]string{`profile name "../x"`, keys.NameForm}},
		{"no profiles at all", nil, []string{"-s", "web:80:3000", "true"},
			[]string{"no profiles yet", "get@HOST install", "plug profile add"}},
		{"several profiles, no -p", map[string]bool{"a": true, "b": true}, []string{"-s", "web:80:3000", "true"},
			[]string{"there are 2 profiles (a, b)", "-p a"}},
		{"missing key pair", map[string]bool{"prod": false}, []string{"-p", "prod", "-s", "web:80:3000", "true"},
			[]string{`profile "prod" has no key pair yet`, "plug keygen -p prod"}},
		{"-s without CMD", map[string]bool{"prod": true}, []string{"-s", "web:80:3000"},
			[]string{"-s needs a command", "-- npm start"}},
		{"-c without CMD", map[string]bool{"prod": true}, []string{"-c"},
			[]string{"-c needs a command", "plug -c -- curl"}},
		{"-p without CMD", map[string]bool{"prod": true}, []string{"-p", "prod"},
			[]string{"no command to run", "plug -p PROFILE -s web:8080:3000 -- npm start"}},
		{"CMD without -s or -c", map[string]bool{"prod": true}, []string{"--", "true"},
			[]string{"Give -s NAME:CLUSTERPORT:LOCALPORT", "-c to only consume"}},
		{"profile of -s not in the run", map[string]bool{"a": true, "b": true}, []string{"-p", "a", "-s", "b/web:80:3000", "true"},
			[]string{`names profile "b"`, "add -p b"}},
		{"unknown flag", map[string]bool{"prod": true}, []string{"-x", "true"},
			[]string{"flag provided but not defined: -x", "plug help run"}},
		{"-p without value", map[string]bool{"prod": true}, []string{"-p"},
			[]string{"flag needs an argument: -p"}},
		{"--header without -s", map[string]bool{"prod": true}, []string{"-c", "--header", "X-Dev=alice", "true"},
			[]string{"go with -s", "--header 'X-Dev=alice'"}},
		{"--path without -s", map[string]bool{"prod": true}, []string{"-c", "--path", "/api", "true"},
			[]string{"go with -s"}},
		{"--header without a value", map[string]bool{"prod": true}, []string{"-s", "web:80:3000", "--header", "X-Dev", "true"},
			[]string{"NAME=VALUE", "NAME~REGEX"}},
		{"--header with a bad regex", map[string]bool{"prod": true}, []string{"-s", "web:80:3000", "--header", "X-Dev~a(", "true"},
			[]string{"X-Dev~a(", "missing closing )"}},
		{"--header with a bad name", map[string]bool{"prod": true}, []string{"-s", "web:80:3000", "--header", "X Dev=a", "true"},
			[]string{"not an HTTP field name"}},
		{"two --header on one name", map[string]bool{"prod": true}, []string{"-s", "web:80:3000", "--header", "X-Dev=a", "--header", "x-dev=b", "true"},
			[]string{"two --header conditions on X-Dev"}},
		{"--path without a slash", map[string]bool{"prod": true}, []string{"-s", "web:80:3000", "--path", "api", "true"},
			[]string{"starts with '/'"}},
		{"--header with a UDP port", map[string]bool{"prod": true}, []string{"-s", "stats:8125:8125/udp", "--header", "X-Dev=a", "true"},
			[]string{"is a UDP port", "route HTTP requests"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHome(t)
			for name, withKey := range tc.profiles {
				h.profile(name, withKey)
			}
			before := snapshot(t, h.store.Dir())
			code, stdout, stderr := plug(t, tc.args...)
			if code != ExitUsage {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, ExitUsage, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if stdout != "" {
				t.Errorf("stdout is not empty: %q", stdout)
			}
			if after := snapshot(t, h.store.Dir()); after != before {
				t.Errorf("a refused run changed ~/.plug:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// snapshot lists the files under dir with their sizes and modes.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err == nil {
			fmt.Fprintf(&b, "%s %v %d\n", path, fi.Mode(), fi.Size())
		}
		return nil
	})
	return b.String()
}

func TestUnknownCommand(t *testing.T) {
	newHome(t)
	code, _, stderr := plug(t, "frobnicate")
	if code != ExitUsage || !strings.Contains(stderr, `there is no command "frobnicate"`) || !strings.Contains(stderr, "plug -p PROFILE -c -- frobnicate") {
		t.Errorf("exit %d, stderr:\n%s", code, stderr)
	}
}

func TestHelpOnEveryCommand(t *testing.T) {
	newHome(t)
	code, stdout, _ := plug(t, "help")
	if code != 0 || !strings.Contains(stdout, "Exit codes:") {
		t.Errorf("plug help: exit %d\n%s", code, stdout)
	}
	for _, args := range [][]string{{"-h"}, {"--help"}} {
		if code, stdout, _ := plug(t, args...); code != 0 || stdout != overview(commands) {
			t.Errorf("plug %v: exit %d, want the overview", args, code)
		}
	}
	if code, stdout, _ := plug(t, "-p", "x", "--help"); code != 0 || stdout != runUsage {
		t.Errorf("plug -p x --help: exit %d, want the usage of runs", code)
	}
	if code, stdout, _ := plug(t, "help", "run"); code != 0 || stdout != runUsage {
		t.Errorf("plug help run: exit %d, want the usage of runs", code)
	}
	for _, c := range commands {
		if c.name == "run" {
			continue
		}
		for _, args := range [][]string{{"help", c.name}, {c.name, "-h"}, {c.name, "--help"}} {
			code, stdout, stderr := plug(t, args...)
			if code != 0 || stdout != c.usage || stderr != "" {
				t.Errorf("plug %v: exit %d, stdout %q, stderr %q; want %s's usage on stdout", args, code, stdout, stderr, c.name)
			}
		}
	}
	if code, _, stderr := plug(t, "help", "nosuch"); code != ExitUsage || !strings.Contains(stderr, `no command or topic "nosuch"`) {
		t.Errorf("plug help nosuch: exit %d, %s", code, stderr)
	}
}

func TestNoArguments(t *testing.T) {
	newHome(t)
	code, stdout, stderr := plug(t)
	if code != ExitUsage || stdout != "" || stderr != overview(commands) {
		t.Errorf("plug with no arguments: exit %d, stdout %q", code, stdout)
	}
}

// With several profiles, a plain -s goes to every profile and
// PROFILE/NAME:... to that one only.
func TestPlanServesAcrossProfiles(t *testing.T) {
	h := newHome(t)
	h.profile("a", true)
	h.profile("b", true)
	t.Setenv("USER", "dev")
	c := newCLI(strings.NewReader(""), io.Discard, io.Discard)
	p, err := c.planRun([]string{"-p", "a", "-p", "b", "-p", "a", "-s", "web:80:3000", "-s", "b/api:8080:4000", "-c", "--", "npm", "-p", "x"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, tg := range p.targets {
		var serves []string
		for _, s := range tg.serves {
			serves = append(serves, s.Name)
		}
		got[tg.profile.Name] = strings.Join(serves, ",") + " as " + tg.user
	}
	if len(p.targets) != 2 || got["a"] != "web as dev" || got["b"] != "web,api as dev" {
		t.Errorf("targets %v; want a: web, b: web,api, each once, as dev", got)
	}
	if strings.Join(p.cmd, " ") != "npm -p x" || !p.client {
		t.Errorf("cmd %q, client %v", p.cmd, p.client)
	}
}

// A name another run holds is refused with one "cannot serve NAME:PORT"
// ahead of the agent's reason, not two, and a UDP port's says /udp.
func TestServeRefusalNamesTheNameOnce(t *testing.T) {
	platform := tunneltest.NewPlatform()
	platform.Hold("shop", 80, tunnel.Holder{Run: "other-run", User: "alice", Developer: "SHA256:alice", Agent: "agent-1"})
	platform.Hold("dns", 53, tunnel.Holder{Run: "other-run", User: "alice", Developer: "SHA256:alice", Agent: "agent-1"})
	doctorHome(t, platform)
	for _, c := range []struct{ serve, want string }{
		{"shop:80:3000", "cannot serve shop:80: shop is already served by alice"},
		{"dns:53:5353/udp", "cannot serve dns:53/udp: "},
	} {
		code, _, stderr := plug(t, "-p", "kube", "-s", c.serve, "--", "true")
		if code == 0 || !strings.Contains(stderr, c.want) || strings.Count(stderr, "cannot serve") != 1 {
			t.Errorf("plug -s %s of a held name: exit %d, want one %q:\n%s", c.serve, code, c.want, stderr)
		}
	}
}
