package tunnel_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/tunnel"
	"plug/tunnel/tunneltest"
)

// openPlatform is the in-memory platform with a deployed web, an
// environment that reads the Secret db (or not), and volumes whose
// requests it records.
type openPlatform struct {
	*tunneltest.Platform
	secret bool // the environment has a value of the Secret db

	mu      sync.Mutex
	volumes []tunnel.VolumeRequest
}

func (p *openPlatform) Env(_ context.Context, req tunnel.EnvRequest) (*tunnel.Env, error) {
	e := &tunnel.Env{Workload: "deployment/web: pod web-1, container app", Vars: []tunnel.EnvVar{{Name: "MODE", Value: "dev"}},
		Sources: []tunnel.EnvSource{{Kind: "ConfigMap", Name: "web", Keys: []string{"MODE"}}}}
	if p.secret {
		e.Vars = append(e.Vars, tunnel.EnvVar{Name: "DB_PASSWORD", Value: "s3cret"})
		e.Sources = append(e.Sources, tunnel.EnvSource{Kind: "Secret", Name: "db", Keys: []string{"password"}})
	}
	return e, nil
}

func (p *openPlatform) ServeVolume(_ context.Context, req tunnel.VolumeRequest) (tunnel.Volume, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.volumes = append(p.volumes, req)
	return tunnel.Volume{ID: "helper", Host: "helper", Port: 445, Share: "volume", User: "u", Password: "p", ReadOnly: req.ReadOnly, Detail: "PersistentVolumeClaim data"}, nil
}

func (p *openPlatform) ReleaseVolume(context.Context, string) error { return nil }

func (p *openPlatform) asked() []tunnel.VolumeRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]tunnel.VolumeRequest(nil), p.volumes...)
}

var (
	_ tunnel.EnvResolver  = (*openPlatform)(nil)
	_ tunnel.VolumeServer = (*openPlatform)(nil)
)

func newOpenPlatform(t *testing.T, secret bool) *openPlatform {
	p := &openPlatform{Platform: tunneltest.NewPlatform(), secret: secret}
	p.AddWorkload("web:80", "127.0.0.1:1")
	p.AddWorkload("helper:445", echoServer(t, ""))
	p.SetNames(tunnel.ClusterName{Name: "web", Ports: []int{80}}, tunnel.ClusterName{Name: "helper", Ports: []int{445}})
	return p
}

// Acceptance 3 without a cluster: each switch that narrows open admission
// refuses what it should, naming itself, for a key nobody vouched for,
// and lets a member's key (the operator's, with open admission) do it all.
// The defaults narrow nothing.
func TestOpenRulesNarrowKeysNobodyVouchedFor(t *testing.T) {
	ctx := ctxFor(t, 60*time.Second)
	member, _ := newKey(t)
	stranger, _ := newKey(t)
	var metrics string // the metrics of the last agent started
	start := func(p *openPlatform, rules tunnel.OpenRules) (string, ssh.PublicKey) {
		if _, err := tunnel.Apply(ctx, p, tunnel.MemberChange{Op: "add", PublicKey: member.PublicKey(), User: "alice", By: "the operator"}); err != nil {
			t.Fatal(err)
		}
		var agent *tunnel.Agent
		addr, hostKey, _ := tunneltest.StartAgent(t, p, func(a *tunnel.Agent) { agent, a.Keys, a.Open = a, tunnel.NewMembers(p, false), rules })
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		mctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go tunnel.ServeMetrics(mctx, l, agent, &tunnel.Metrics{})
		metrics = l.Addr().String()
		return addr, hostKey
	}
	refusals := func(reason string) float64 {
		return scrape(t, metrics).samples[`plug_refusals_total{reason="`+reason+`"}`]
	}
	session := func(addr string, hostKey ssh.PublicKey, signer ssh.Signer) *tunnel.Session {
		s, _ := connect(t, addr, hostKey, signer, tunnel.RunInfo{Serves: true})
		return s
	}
	wantRefusal := func(what string, err error, words ...string) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: not refused", what)
			return
		}
		for _, w := range words {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v; want it to say %q", what, err, w)
			}
		}
	}
	volume := tunnel.VolumeRequest{Kind: tunnel.WorkloadDeployment, Name: "web", Volume: "data"}

	t.Run("defaults", func(t *testing.T) {
		p := newOpenPlatform(t, true)
		addr, hostKey := start(p, tunnel.OpenRules{})
		s := session(addr, hostKey, stranger)
		if served, err := s.Serve(ctx, "web", 80, echoServer(t, "")); err != nil || !served.TookOver {
			t.Errorf("a stranger's takeover by default: %+v %v", served, err)
		}
		env, err := tunnel.FetchEnv(ctx, tunnel.ClientConfig{Addr: addr, User: "dev", Signer: stranger, HostKey: hostKey}, tunnel.EnvRequest{Kind: tunnel.WorkloadDeployment, Name: "web"})
		if err != nil || len(env.Vars) != 2 {
			t.Errorf("a stranger's --env-from by default: %+v %v", env, err)
		}
		if v, err := s.Volume(ctx, volume); err != nil || v.ReadOnly {
			t.Errorf("a stranger's volume by default: %+v %v", v, err)
		}
	})

	t.Run("serve new", func(t *testing.T) {
		p := newOpenPlatform(t, false)
		addr, hostKey := start(p, tunnel.OpenRules{Serve: tunnel.OpenServeNew})
		s := session(addr, hostKey, stranger)
		_, err := s.Serve(ctx, "web", 80, echoServer(t, ""))
		wantRefusal("a stranger's takeover", err, "PLUG_OPEN_SERVE=new", "deployed service", "plug agent members add")
		if _, held := p.Held("web"); held {
			t.Error("the refused takeover holds web")
		}
		_, err = s.ServeFiltered(ctx, "web", 80, echoServer(t, ""), tunnel.Filter{Path: "/mine"})
		wantRefusal("a stranger's personal takeover", err, "PLUG_OPEN_SERVE=new")
		if n := refusals("open_takeover"); n < 2 {
			t.Errorf("plug_refusals_total{reason=\"open_takeover\"} = %v after two refusals", n)
		}
		if served, err := s.Serve(ctx, "fresh", 80, echoServer(t, "")); err != nil || served.TookOver {
			t.Errorf("a stranger's new name: %+v %v", served, err)
		}
		if served, err := session(addr, hostKey, member).Serve(ctx, "web", 80, echoServer(t, "")); err != nil || !served.TookOver {
			t.Errorf("a member's takeover: %+v %v", served, err)
		}
	})

	t.Run("serve none", func(t *testing.T) {
		p := newOpenPlatform(t, false)
		addr, hostKey := start(p, tunnel.OpenRules{Serve: tunnel.OpenServeNone})
		s := session(addr, hostKey, stranger)
		_, err := s.Serve(ctx, "fresh", 80, echoServer(t, ""))
		wantRefusal("a stranger's new name", err, "PLUG_OPEN_SERVE=none", "-c")
		if n := refusals("open_serve"); n < 1 {
			t.Errorf("plug_refusals_total{reason=\"open_serve\"} = %v after a refusal", n)
		}
		if _, held := p.Held("fresh"); held {
			t.Error("the refused name is held")
		}
		expectEcho(t, func() (net.Conn, error) { return s.Dial(ctx, "helper:445") }, "")
	})

	t.Run("env secrets off", func(t *testing.T) {
		for _, secret := range []bool{true, false} {
			p := newOpenPlatform(t, secret)
			addr, hostKey := start(p, tunnel.OpenRules{NoEnvSecrets: true})
			cfg := func(signer ssh.Signer) tunnel.ClientConfig {
				return tunnel.ClientConfig{Addr: addr, User: "dev", Signer: signer, HostKey: hostKey}
			}
			req := tunnel.EnvRequest{Kind: tunnel.WorkloadDeployment, Name: "web"}
			env, err := tunnel.FetchEnv(ctx, cfg(stranger), req)
			if secret {
				wantRefusal("a stranger's --env-from reading a Secret", err, "PLUG_OPEN_ENV_SECRETS=off", "Secret db", "nothing was sent")
				if n := refusals("open_env_secrets"); n < 1 {
					t.Errorf("plug_refusals_total{reason=\"open_env_secrets\"} = %v after a refusal", n)
				}
				if env != nil && len(env.Vars) > 0 {
					t.Errorf("the refusal sent %+v", env.Vars)
				}
				if env, err := tunnel.FetchEnv(ctx, cfg(member), req); err != nil || len(env.Vars) != 2 {
					t.Errorf("a member's --env-from: %+v %v", env, err)
				}
			} else if err != nil || len(env.Vars) != 1 {
				t.Errorf("a stranger's --env-from reading no Secret: %+v %v", env, err)
			}
		}
	})

	t.Run("volumes", func(t *testing.T) {
		p := newOpenPlatform(t, false)
		addr, hostKey := start(p, tunnel.OpenRules{Volumes: tunnel.OpenVolumesOff})
		_, err := session(addr, hostKey, stranger).Volume(ctx, volume)
		wantRefusal("a stranger's volume", err, "PLUG_OPEN_VOLUMES=off", "deployment/web:data")
		if n := refusals("open_volumes"); n < 1 {
			t.Errorf("plug_refusals_total{reason=\"open_volumes\"} = %v after a refusal", n)
		}
		if asked := p.asked(); len(asked) != 0 {
			t.Errorf("the refused volume was asked of the platform: %+v", asked)
		}
		if v, err := session(addr, hostKey, member).Volume(ctx, volume); err != nil || v.ReadOnly {
			t.Errorf("a member's volume: %+v %v", v, err)
		}

		p = newOpenPlatform(t, false)
		addr, hostKey = start(p, tunnel.OpenRules{Volumes: tunnel.OpenVolumesReadOnly})
		v, err := session(addr, hostKey, stranger).Volume(ctx, volume)
		if err != nil || !v.ReadOnly || !strings.Contains(v.Detail, "PLUG_OPEN_VOLUMES=read-only") {
			t.Errorf("a stranger's volume, read-only: %+v %v", v, err)
		}
		if asked := p.asked(); len(asked) != 1 || !asked[0].ReadOnly {
			t.Errorf("the platform was asked for %+v, want one read-only", asked)
		}
	})
}

// A value that is not one of a switch's is refused, naming the switch and
// its values; unset, every switch keeps today's behaviour.
func TestParseOpenRules(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if o, err := tunnel.ParseOpenRules(env(nil)); err != nil || o != (tunnel.OpenRules{}) {
		t.Errorf("unset: %+v %v", o, err)
	}
	o, err := tunnel.ParseOpenRules(env(map[string]string{"PLUG_OPEN_SERVE": "new", "PLUG_OPEN_ENV_SECRETS": "off", "PLUG_OPEN_VOLUMES": "read-only"}))
	if err != nil || o != (tunnel.OpenRules{Serve: "new", NoEnvSecrets: true, Volumes: "read-only"}) {
		t.Errorf("set: %+v %v", o, err)
	}
	if o, err := tunnel.ParseOpenRules(env(map[string]string{"PLUG_OPEN_SERVE": "takeover", "PLUG_OPEN_ENV_SECRETS": "on", "PLUG_OPEN_VOLUMES": "read-write"})); err != nil || o != (tunnel.OpenRules{}) {
		t.Errorf("the defaults spelt out: %+v %v", o, err)
	}
	for name, want := range map[string]string{
		"PLUG_OPEN_SERVE":       "takeover, new, none",
		"PLUG_OPEN_ENV_SECRETS": "on, off",
		"PLUG_OPEN_VOLUMES":     "read-write, read-only, off",
	} {
		_, err := tunnel.ParseOpenRules(env(map[string]string{name: "maybe\x1b[2J"}))
		if err == nil || !strings.Contains(err.Error(), name+"=") || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\x1b") {
			t.Errorf("%s=maybe: %v", name, err)
		}
	}
}
