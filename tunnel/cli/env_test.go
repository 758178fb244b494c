package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"

	"strings"
	"testing"

	"plug/tunnel"
	"plug/tunnel/tunneltest"
)

// With PLUG_TEST_ENV_OUT=FILE the test binary is a CMD that writes its
// environment to FILE as a JSON object.
func init() {
	if out := os.Getenv("PLUG_TEST_ENV_OUT"); out != "" {
		m := map[string]string{}
		for _, kv := range os.Environ() {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
		b, _ := json.Marshal(m)
		if err := os.WriteFile(out, b, 0o600); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// envPlatform is the in-memory platform with one workload's environment.
type envPlatform struct {
	*tunneltest.Platform
	env   *tunnel.Env
	asked []tunnel.EnvRequest
}

func (p *envPlatform) Env(_ context.Context, req tunnel.EnvRequest) (*tunnel.Env, error) {
	p.asked = append(p.asked, req)
	if req.Name != "web" {
		return nil, fmt.Errorf("%s does not exist in namespace shop", req)
	}
	e := *p.env
	e.Vars = append([]tunnel.EnvVar(nil), p.env.Vars...)
	return &e, nil
}

// tricky are values a dotenv file must carry exactly.
var tricky = map[string]string{
	"PLAIN":     "abc-1.2_3:4/5@6%7+8,9",
	"EMPTY":     "",
	"SPACES":    "  two  spaces  ",
	"NEWLINES":  "line one\nline two\n",
	"QUOTES":    `she said "it's fine"`,
	"SINGLE":    "it's",
	"BACKSLASH": `C:\path\to\new`,
	"DOLLAR":    "$HOME $(VAR) ${BRACED} $$ $",
	"EQUALS":    "a=b==c",
	"HASH":      "value # not a comment",
	"UNICODE":   "ünïcödé ✓ 日本語 🚀",
	"CRLF":      "windows\r\nline\r\n",
	"TAB":       "a\tb",
	"MIXED":     "'single' \"double\" \\ $ = \n ü",
}

func trickyEnv() *tunnel.Env {
	e := &tunnel.Env{Workload: "deployment/web: pod web-1, container app"}
	for k, v := range tricky {
		e.Vars = append(e.Vars, tunnel.EnvVar{Name: k, Value: v})
	}
	e.Vars = append(e.Vars,
		tunnel.EnvVar{Name: "PATH", Value: "/usr/local/bin:/usr/bin"},
		tunnel.EnvVar{Name: "HOME", Value: "/"},
		tunnel.EnvVar{Name: "LANG", Value: "C.UTF-8"},
		tunnel.EnvVar{Name: "OVERRIDDEN", Value: "from the workload"},
	)
	e.LeftOut = []tunnel.EnvGap{
		{Name: "DB_PASSWORD", Why: `Secret "db", key "password"`, Rule: "get secrets"},
		{Why: `every variable of Secret "creds" (envFrom)`, Rule: "get secrets"},
		{Name: "CPU", Why: "limits.cpu is not set"},
	}
	e.Notes = []string{"the image's own ENV is not included: no pod runs"}
	tunnel.CheckEnv(e)
	return e
}

// CMD gets exactly the workload's environment, but for what this machine
// keeps (PATH, HOME, …, and --env-keep) and the --env settings; the files
// hold the same, at mode 0600; stderr names what was left out and the
// rule, and holds no value.
func TestEnvFromGivesCMDTheWorkloadsEnvironment(t *testing.T) {
	store := useHome(t)
	platform := &envPlatform{Platform: tunneltest.NewPlatform(), env: trickyEnv()}
	startAgentFor(t, store, "shop", platform)
	dir := t.TempDir()
	out, dotenvFile, jsonFile := filepath.Join(dir, "cmd.json"), filepath.Join(dir, ".env"), filepath.Join(dir, "env.json")
	os.WriteFile(dotenvFile, []byte("OLD=1\n"), 0o644)
	t.Setenv("LANG", "xx_XX.UTF-8")
	t.Setenv("PLUG_TEST_LAPTOP_ONLY", "not for CMD")

	code, _, stderr := runPlug(t, "-p", "shop", "--env-from", "deploy/web:app",
		"--env-file", dotenvFile, "--env-json", jsonFile,
		"--env", "OVERRIDDEN=by --env", "--env", "PLUG_TEST_ENV_OUT="+out, "--env-keep", "-LANG",
		"--", os.Args[0])
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	if want := []tunnel.EnvRequest{{Kind: "deployment", Name: "web", Container: "app"}}; !reflect.DeepEqual(platform.asked, want) {
		t.Errorf("the agent was asked %+v", platform.asked)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	json.Unmarshal(raw, &got)
	want := map[string]string{"LANG": "C.UTF-8", "OVERRIDDEN": "by --env", "PLUG_TEST_ENV_OUT": out}
	for k, v := range tricky {
		want[k] = v
	}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if (keepRules{keep: laptopVars, drop: []string{"LANG"}}).keeps(k) {
			want[k] = v
		}
	}
	if runtime.GOOS == "windows" {
		delete(want, "EMPTY") // Windows drops empty variables from a new process
		delete(got, "EMPTY")
	}
	if !reflect.DeepEqual(got, want) {
		for k := range union(got, want) {
			if got[k] != want[k] {
				t.Errorf("CMD's %s = %q, want %q", k, got[k], want[k])
			}
		}
	}

	for _, line := range []string{
		"plug: environment of deployment/web: pod web-1, container app: 18 variables; this machine's own kept: HOME, PATH",
		`plug: left out, as the agent lacks the right "get secrets" (plug doctor -p shop prints the command that grants it): DB_PASSWORD (Secret "db", key "password"), every variable of Secret "creds" (envFrom)`,
		"plug: left out, as only the node knows them: CPU (limits.cpu is not set)",
		"plug: note: the image's own ENV is not included: no pod runs",
		"plug: wrote " + dotenvFile + " (17 variables, readable by you only)",
	} {
		if !strings.Contains(stderr, line+"\n") {
			t.Errorf("stderr lacks %q:\n%s", line, stderr)
		}
	}
	for _, v := range tricky {
		if len(v) > 3 && strings.Contains(stderr, v) {
			t.Errorf("stderr holds the value %q:\n%s", v, stderr)
		}
	}

	var inJSON map[string]string
	raw, _ = os.ReadFile(jsonFile)
	if err := json.Unmarshal(raw, &inJSON); err != nil {
		t.Fatalf("%s: %v", jsonFile, err)
	}
	wantFiles := map[string]string{"LANG": "C.UTF-8", "OVERRIDDEN": "by --env", "PLUG_TEST_ENV_OUT": out}
	for k, v := range tricky {
		wantFiles[k] = v
	}
	if !reflect.DeepEqual(inJSON, wantFiles) {
		t.Errorf("%s = %v, want %v", jsonFile, inJSON, wantFiles)
	}
	for _, f := range []string{dotenvFile, jsonFile} {
		if fi, err := os.Stat(f); err != nil || runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v, want 0600", f, err, fi.Mode())
		}
	}
	if parsed, ok := pythonDotenv(t, dotenvFile); ok && !reflect.DeepEqual(parsed, wantFiles) {
		for k := range union(parsed, wantFiles) {
			if parsed[k] != wantFiles[k] {
				t.Errorf("python-dotenv reads %s = %q, want %q", k, parsed[k], wantFiles[k])
			}
		}
	}
}

// With -- and no CMD, plug writes the files and exits 0; a workload the
// agent does not find exits 3, says so, and neither writes nor runs
// anything.
func TestEnvFromWithoutCMDAndForAMissingWorkload(t *testing.T) {
	store := useHome(t)
	platform := &envPlatform{Platform: tunneltest.NewPlatform(), env: trickyEnv()}
	startAgentFor(t, store, "shop", platform)
	dir := t.TempDir()
	file := filepath.Join(dir, "web.env")
	if code, stdout, stderr := runPlug(t, "--env-from", "deploy/web", "--env-file", file, "--"); code != 0 || stdout != "" {
		t.Fatalf("exit %d, stdout %q:\n%s", code, stdout, stderr)
	}
	if b, err := os.ReadFile(file); err != nil || !strings.Contains(string(b), "\nUNICODE='ünïcödé ✓ 日本語 🚀'\n") {
		t.Errorf("%s: %v\n%s", file, err, b)
	}

	marker := filepath.Join(dir, "ran")
	code, _, stderr := runPlug(t, "--env-from", "deploy/nope", "--env-file", filepath.Join(dir, "nope.env"),
		"--env", "PLUG_TEST_ENV_OUT="+marker, "-c", "--", os.Args[0])
	if code != ExitConnect || !strings.Contains(stderr, "plug: cannot read the environment of deployment/nope: deployment/nope does not exist in namespace shop") {
		t.Errorf("exit %d:\n%s", code, stderr)
	}
	for _, f := range []string{marker, filepath.Join(dir, "nope.env")} {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists: CMD ran or a file was written", f)
		}
	}
	if len(platform.Calls()) != 0 {
		t.Errorf("the run served or released names: %v", platform.Calls())
	}
}

func TestEnvFlagsRefusedBeforeContactingAnything(t *testing.T) {
	for _, tc := range []struct {
		name     string
		profiles []string
		args     []string
		want     string
	}{
		{"two --env-from", []string{"prod"}, []string{"--env-from", "deploy/a", "--env-from", "deploy/b", "true"}, "one --env-from a run"},
		{"--env-file alone", []string{"prod"}, []string{"-c", "--env-file", ".env", "true"}, "go with --env-from"},
		{"--env-keep alone", []string{"prod"}, []string{"-c", "--env-keep", "X", "true"}, "go with --env-from"},
		{"no kind", []string{"prod"}, []string{"--env-from", "web", "true"}, "name a workload as KIND/NAME[:CONTAINER]"},
		{"unknown kind", []string{"prod"}, []string{"--env-from", "cronjob/web", "true"}, `"cronjob" is not a kind of workload`},
		{"bad name", []string{"prod"}, []string{"--env-from", "deploy/we b", "true"}, "may hold only letters"},
		{"empty container", []string{"prod"}, []string{"--env-from", "deploy/web:", "true"}, "the container after ':' is empty"},
		{"whose workload", []string{"a", "b"}, []string{"-p", "a", "-p", "b", "--env-from", "deploy/web", "true"}, "say whose workload it is, e.g. --env-from a/deploy/web"},
		{"profile not in the run", []string{"a", "b"}, []string{"-p", "a", "--env-from", "b/deploy/web", "true"}, `names profile "b"`},
		{"nothing to do", []string{"prod"}, []string{"--env-from", "deploy/web", "--"}, "give CMD to run with it, or --env-file FILE"},
		{"--env without =", []string{"prod"}, []string{"--env", "X", "-c", "true"}, "give NAME=VALUE"},
		{"--env-keep with =", []string{"prod"}, []string{"--env-from", "deploy/web", "--env-keep", "A=B", "true"}, "give names or prefixes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHome(t)
			for _, p := range tc.profiles {
				h.profile(p, true)
			}
			code, _, stderr := plug(t, tc.args...)
			if code != ExitUsage || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, want %d with %q:\n%s", code, ExitUsage, tc.want, stderr)
			}
		})
	}
}

func TestKeepRules(t *testing.T) {
	r, err := parseKeep([]string{"GOPATH,NODE_*", "-LANG", "-SSH_*"})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"PATH": true, "HOME": true, "LC_ALL": true, "GOPATH": true, "NODE_ENV": true,
		"LANG": false, "SSH_AUTH_SOCK": false, "DATABASE_URL": false, "PATHS": false, "GOPATH2": false,
	} {
		if r.keeps(name) != want {
			t.Errorf("keeps(%s) = %v, want %v", name, !want, want)
		}
	}
	none, _ := parseKeep([]string{"-*"})
	if none.keeps("PATH") || none.keeps("HOME") {
		t.Errorf("--env-keep '-*' keeps something")
	}
}

// The dotenv form of each value: bare when it is plain, in single quotes
// when that is literal, else in double quotes with escapes.
func TestDotenvValue(t *testing.T) {
	for v, want := range map[string]string{
		"abc-1.2":          "abc-1.2",
		"":                 "",
		"two words":        "'two words'",
		"line\nbreak":      "'line\nbreak'",
		`say "hi"`:         `'say "hi"'`,
		"$HOME":            "'$HOME'",
		"it's":             `"it's"`,
		`back\slash`:       `"back\\slash"`,
		"cr\r\n":           `"cr\r\n"`,
		"it's \"q\"\n\\\t": `"it's \"q\"\n\\\t"`,
	} {
		if got := dotenvValue(v); got != want {
			t.Errorf("dotenvValue(%q) = %s, want %s", v, got, want)
		}
	}
}

// pythonDotenv reads file with python-dotenv, interpolation off, as the
// developer's tools would. Without it the check is skipped, or fails
// under CI (testdata/cluster/up.sh installs python3-dotenv).
func pythonDotenv(t *testing.T, file string) (map[string]string, bool) {
	t.Helper()
	py := "/usr/bin/python3"
	script := "import dotenv, json, sys; json.dump(dotenv.dotenv_values(sys.argv[1], interpolate=False), sys.stdout)"
	if err := exec.Command(py, "-c", "import dotenv").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Errorf("python-dotenv is not installed (apt-get install python3-dotenv): %v", err)
		} else {
			t.Logf("python-dotenv is not installed (apt-get install python3-dotenv): the file is not read back")
		}
		return nil, false
	}
	out, err := exec.Command(py, "-c", script, file).Output()
	if err != nil {
		t.Errorf("python-dotenv: %v", err)
		return nil, false
	}
	var m map[string]string
	if err := json.Unmarshal(out, &m); err != nil {
		t.Errorf("python-dotenv's answer: %v", err)
	}
	return m, true
}

func union(a, b map[string]string) map[string]bool {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	return keys
}
