package tunnel_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// envPlatform is the in-memory platform with workloads' environments.
type envPlatform struct {
	*tunneltest.Platform
	env func(tunnel.EnvRequest) (*tunnel.Env, error)
}

func (p *envPlatform) Env(_ context.Context, req tunnel.EnvRequest) (*tunnel.Env, error) {
	return p.env(req)
}

var _ tunnel.EnvResolver = (*envPlatform)(nil)

func fetchEnv(t *testing.T, platform tunnel.Platform, req tunnel.EnvRequest, log *lines) (*tunnel.Env, error) {
	t.Helper()
	addr, hostKey, _ := tunneltest.StartAgent(t, platform, agentLog(log))
	signer, _ := newKey(t)
	cfg := tunnel.ClientConfig{Addr: addr, User: "dev", Signer: signer, HostKey: hostKey}
	return tunnel.FetchEnv(ctxFor(t, 20*time.Second), cfg, req)
}

// The environment arrives whole: every variable with its exact bytes
// (newlines, quotes, $, =, unicode, a value that is not UTF-8, a value
// of 100 KiB cut into pieces on the wire, thousands of variables over
// several messages), what was left out and why, and the notes. The
// agent's log names the workload and counts, never a value.
func TestFetchEnvCarriesTheWholeEnvironment(t *testing.T) {
	want := &tunnel.Env{
		Workload: "deployment/web: pod web-1, container app",
		Vars: []tunnel.EnvVar{
			{Name: "BIG", Value: strings.Repeat("0123456789", 10<<10)},
			{Name: "BINARY", Value: "\xff\xfe\x01end"},
			{Name: "EMPTY", Value: ""},
			{Name: "MULTI", Value: "line one\nline \"two\"\n'three' $HOME $(X) a=b ünïcödé 🚀\r\n"},
		},
		LeftOut: []tunnel.EnvGap{
			{Name: "DB_PASSWORD", Why: `Secret "db", key "password"`, Rule: "get secrets"},
			{Why: `every variable of Secret "creds" (envFrom)`, Rule: "get secrets"},
		},
		Notes: []string{"the image's own ENV was not read: no pod runs"},
	}
	for i := range 3000 {
		want.Vars = append(want.Vars, tunnel.EnvVar{Name: fmt.Sprintf("V%04d", i), Value: fmt.Sprintf("value %d", i)})
	}
	var asked tunnel.EnvRequest
	platform := &envPlatform{Platform: tunneltest.NewPlatform(), env: func(req tunnel.EnvRequest) (*tunnel.Env, error) {
		asked = req
		e := *want
		e.Vars = append([]tunnel.EnvVar(nil), want.Vars...)
		return &e, nil
	}}
	var log lines
	got, err := fetchEnv(t, platform, tunnel.EnvRequest{Kind: tunnel.WorkloadDeployment, Name: "web", Container: "app"}, &log)
	if err != nil {
		t.Fatal(err)
	}
	if asked != (tunnel.EnvRequest{Kind: "deployment", Name: "web", Container: "app"}) {
		t.Errorf("the platform was asked for %+v", asked)
	}
	tunnel.CheckEnv(want) // sorts
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %d vars %+v, %+v, %q; want %d vars", len(got.Vars), got.LeftOut, got.Notes, got.Workload, len(want.Vars))
		for i := range min(len(got.Vars), len(want.Vars)) {
			if got.Vars[i] != want.Vars[i] {
				t.Errorf("var %d: %q=%q, want %q=%q", i, got.Vars[i].Name, trim(got.Vars[i].Value), want.Vars[i].Name, trim(want.Vars[i].Value))
				break
			}
		}
	}
	clustertest.Until(t, clustertest.Settle, "the agent's log line", func() bool { return log.has("environment of deployment/web:app for dev") })
	if !log.has("3004 variables, 2 left out") {
		t.Errorf("the log does not count the variables:\n%s", log.String())
	}
	if log.has("value 1") || log.has("line one") {
		t.Errorf("the log holds a value:\n%s", log.String())
	}
}

func trim(s string) string { return s[:min(len(s), 40)] }

// A refusal reaches the CLI as the platform worded it; a variable no
// process can have is left out, saying why; an environment beyond plug's
// limits is refused as a whole; an agent whose platform has no
// environments says so.
func TestFetchEnvRefusals(t *testing.T) {
	answer := func(e *tunnel.Env, err error) *envPlatform {
		return &envPlatform{Platform: tunneltest.NewPlatform(), env: func(tunnel.EnvRequest) (*tunnel.Env, error) { return e, err }}
	}
	req := tunnel.EnvRequest{Kind: tunnel.WorkloadDeployment, Name: "web"}

	_, err := fetchEnv(t, answer(nil, errors.New(`deployment "web" does not exist in namespace shop`)), req, &lines{})
	var refused *tunnel.EnvError
	if !errors.As(err, &refused) || refused.Text != `deployment "web" does not exist in namespace shop` {
		t.Errorf("a refusal: err = %v", err)
	}

	env, err := fetchEnv(t, answer(&tunnel.Env{Vars: []tunnel.EnvVar{{Name: "OK", Value: "1"}, {Name: "NUL", Value: "a\x00b"}, {Name: "A=B", Value: "x"}}}, nil), req, &lines{})
	if err != nil {
		t.Fatal(err)
	}
	if len(env.Vars) != 1 || env.Vars[0].Name != "OK" || len(env.LeftOut) != 2 || !strings.Contains(env.LeftOut[0].Why+env.LeftOut[1].Why, "NUL") {
		t.Errorf("variables no process can have: %+v", env)
	}

	huge := &tunnel.Env{}
	for i := range 20 {
		huge.Vars = append(huge.Vars, tunnel.EnvVar{Name: fmt.Sprintf("V%d", i), Value: strings.Repeat("x", 100<<10)})
	}
	_, err = fetchEnv(t, answer(huge, nil), req, &lines{})
	if !errors.As(err, &refused) || !strings.Contains(refused.Text, "more than plug carries") {
		t.Errorf("an environment beyond the limits: err = %v", err)
	}

	_, err = fetchEnv(t, tunneltest.NewPlatform(), req, &lines{})
	if !errors.As(err, &refused) || !strings.Contains(refused.Text, "cannot read workloads' environments") {
		t.Errorf("a platform without environments: err = %v", err)
	}

	for _, bad := range []tunnel.EnvRequest{
		{Kind: "cronjob", Name: "web"},
		{Kind: "deployment", Name: ""},
		{Kind: "deployment", Name: "-web"},
		{Kind: "deployment", Name: "web/x"},
		{Kind: "deployment", Name: "web", Container: "a b"},
		{Kind: "deployment", Name: strings.Repeat("a", 254)},
	} {
		if err := tunnel.CheckEnvRequest(bad); err == nil {
			t.Errorf("CheckEnvRequest(%+v) accepts it", bad)
		}
	}
}

// An environment read is one env.read line of the audit trail: who, the
// workload, and each ConfigMap and Secret with the keys read; never a
// value.
func TestEnvReadIsAudited(t *testing.T) {
	platform := &envPlatform{Platform: tunneltest.NewPlatform(), env: func(req tunnel.EnvRequest) (*tunnel.Env, error) {
		return &tunnel.Env{
			Workload: "deployment/web: pod web-1, container app",
			Vars:     []tunnel.EnvVar{{Name: "PASSWORD", Value: "s3cr3t"}, {Name: "MODE", Value: "fast"}},
			Sources: []tunnel.EnvSource{
				{Kind: "ConfigMap", Name: "cfg", Keys: []string{"MODE"}},
				{Kind: "Secret", Name: "db", Keys: []string{"password"}},
			},
		}, nil
	}}
	audit := tunneltest.NewAudit()
	addr, hostKey, _ := tunneltest.StartAgent(t, platform, func(a *tunnel.Agent) { a.Audit = audit.Sink })
	signer, _ := newKey(t)
	fp := ssh.FingerprintSHA256(signer.PublicKey())
	cfg := tunnel.ClientConfig{Addr: addr, User: "dev", Signer: signer, HostKey: hostKey}
	if _, err := tunnel.FetchEnv(ctxFor(t, 20*time.Second), cfg, tunnel.EnvRequest{Kind: tunnel.WorkloadDeployment, Name: "web"}); err != nil {
		t.Fatal(err)
	}
	e := audit.Await(t, clustertest.Settle, "the env.read event", func(e tunnel.AuditEvent) bool { return e.Event == tunnel.AuditEnvRead })
	var line strings.Builder
	tunnel.AuditJSON(&line)(e)
	for _, want := range []string{
		`"schema":1,`, `"event":"env.read"`, `"user":"dev"`, `"key":"` + fp + `"`, `"workload":"deployment/web: pod web-1, container app"`,
		`"read":[{"kind":"ConfigMap","name":"cfg","keys":["MODE"]},{"kind":"Secret","name":"db","keys":["password"]}]`,
	} {
		if !strings.Contains(line.String(), want) {
			t.Errorf("the audit line lacks %s:\n%s", want, line.String())
		}
	}
	if strings.Contains(line.String(), "s3cr3t") || strings.Contains(line.String(), "fast") {
		t.Errorf("the audit line holds a value:\n%s", line.String())
	}
}
