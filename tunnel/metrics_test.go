package tunnel_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"plug/keys"
	"plug/tunnel"
	"plug/tunnel/clustertest"
	"plug/tunnel/tunneltest"
)

// exposition is a scrape parsed strictly (parseExposition): each
// family's type, and each sample's value by its series, e.g.
// `plug_name{name="web",port="80"}` with labels in the order written.
type exposition struct {
	types   map[string]string
	samples map[string]float64
}

var (
	metricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	labelPair  = regexp.MustCompile(`^([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(,|$)`)
)

// parseExposition parses the Prometheus text format (0.0.4) as strictly
// as a scraper would, and more: every family has one HELP and one TYPE
// (counter or gauge) before its samples, which follow together; names and
// label names are well formed, label values escaped (only \\, \" and \n),
// values numbers; a counter's name ends in _total; no series twice; the
// text ends with a line feed.
func parseExposition(text string) (*exposition, error) {
	if !strings.HasSuffix(text, "\n") {
		return nil, fmt.Errorf("the text does not end with a line feed")
	}
	x := &exposition{types: map[string]string{}, samples: map[string]float64{}}
	helped := map[string]bool{}
	current, done := "", map[string]bool{}
	for i, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		at := fmt.Sprintf("line %d %q", i+1, line)
		if rest, ok := strings.CutPrefix(line, "# "); ok {
			kind, rest, _ := strings.Cut(rest, " ")
			name, arg, _ := strings.Cut(rest, " ")
			if !metricName.MatchString(name) {
				return nil, fmt.Errorf("%s: bad metric name", at)
			}
			switch kind {
			case "HELP":
				if helped[name] || done[name] || x.types[name] != "" {
					return nil, fmt.Errorf("%s: HELP again, or after the family's TYPE or samples", at)
				}
				helped[name] = true
			case "TYPE":
				if x.types[name] != "" || done[name] || !helped[name] {
					return nil, fmt.Errorf("%s: TYPE again, after samples, or without HELP", at)
				}
				if arg != "counter" && arg != "gauge" {
					return nil, fmt.Errorf("%s: type %q", at, arg)
				}
				if (arg == "counter") != strings.HasSuffix(name, "_total") {
					return nil, fmt.Errorf("%s: a counter's name, and only a counter's, ends in _total", at)
				}
				x.types[name] = arg
				if current != "" && current != name {
					done[current] = true
				}
				current = name
			default:
				return nil, fmt.Errorf("%s: a comment that is neither HELP nor TYPE", at)
			}
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		if !ok || strings.Contains(value, " ") {
			return nil, fmt.Errorf("%s: not NAME VALUE", at)
		}
		name, labels, hasLabels := strings.Cut(series, "{")
		if name != current || x.types[name] == "" {
			return nil, fmt.Errorf("%s: a sample outside its family, or before its TYPE", at)
		}
		if hasLabels {
			body, ok := strings.CutSuffix(labels, "}")
			if !ok || body == "" {
				return nil, fmt.Errorf("%s: bad labels", at)
			}
			for body != "" {
				m := labelPair.FindStringSubmatch(body)
				if m == nil {
					return nil, fmt.Errorf("%s: bad label at %q", at, body)
				}
				body = body[len(m[0]):]
				if m[3] == "," && body == "" {
					return nil, fmt.Errorf("%s: a trailing comma", at)
				}
			}
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: value: %v", at, err)
		}
		if _, dup := x.samples[series]; dup {
			return nil, fmt.Errorf("%s: the series again", at)
		}
		x.samples[series] = v
	}
	return x, nil
}

// find returns the samples whose series starts with prefix.
func (x *exposition) find(prefix string) map[string]float64 {
	out := map[string]float64{}
	for s, v := range x.samples {
		if strings.HasPrefix(s, prefix) {
			out[s] = v
		}
	}
	return out
}

// The parser refuses what a scraper would.
func TestExpositionParserIsStrict(t *testing.T) {
	for _, bad := range []string{
		"# HELP a_total x\n# TYPE a_total counter\na_total 1",                // no final line feed
		"# TYPE a gauge\na 1\n",                                              // no HELP
		"# HELP a x\n# TYPE a counter\na 1\n",                                // a counter not _total
		"# HELP a x\n# TYPE a gauge\na{l=\"x\\q\"} 1\n",                      // a bad escape
		"# HELP a x\n# TYPE a gauge\na{l=\"x\"} 1\na{l=\"x\"} 2\n",           // a series twice
		"# HELP a x\n# TYPE a gauge\n# HELP b x\n# TYPE b gauge\nb 1\na 1\n", // samples apart from their family
		"# HELP a x\n# TYPE a gauge\na{l=\"x\",} 1\n",                        // a trailing comma
		"# HELP a x\n# TYPE a gauge\na one\n",                                // not a number
	} {
		if _, err := parseExposition(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
	names := []tunnel.MetricFamily{{Name: "a", Help: "h\\x\ny", Type: "gauge", Samples: []tunnel.Sample{{Labels: []tunnel.Label{{Name: "l", Value: "q\"\\\n"}}, Value: 2}}}}
	var b strings.Builder
	tunnel.WriteExposition(&b, names)
	x, err := parseExposition(b.String())
	if err != nil || x.samples[`a{l="q\"\\\n"}`] != 2 {
		t.Errorf("a hostile label value: %v\n%s", err, b.String())
	}
}

// scrape GETs the metrics at addr and parses them.
func scrape(t *testing.T, addr string) *exposition {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("GET /metrics: %s %q\n%s", resp.Status, resp.Header.Get("Content-Type"), body)
	}
	x, err := parseExposition(string(body))
	if err != nil {
		t.Fatalf("the exposition: %v\n%s", err, body)
	}
	return x
}

// The metrics endpoint shows a run while it is open, each name it serves,
// what it parked, and the build; once the run ended, its series are gone
// and the counters say how it ended.
func TestMetricsShowRunsAndNames(t *testing.T) {
	platform := tunneltest.NewPlatform()
	platform.AddWorkload("checkout:80", "127.0.0.1:1")
	m := &tunnel.Metrics{}
	audit := tunneltest.NewAudit()
	var agent *tunnel.Agent
	addr, hostKey, _ := tunneltest.StartAgent(t, platform, func(a *tunnel.Agent) {
		agent = a
		a.Audit = func(e tunnel.AuditEvent) { m.Observe(e); audit.Sink(e) }
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go tunnel.ServeMetrics(ctx, l, agent, m)
	metrics := l.Addr().String()

	signer, _ := newKey(t)
	fp := keys.Fingerprint(signer.PublicKey())
	s, _ := connect(t, addr, hostKey, signer, tunnel.RunInfo{ID: "run-m", Serves: true})
	if _, err := s.Serve(ctxFor(t, 20*time.Second), "checkout", 80, echoServer(t, "")); err != nil {
		t.Fatal(err)
	}
	audit.Await(t, clustertest.Settle, "name.served", func(e tunnel.AuditEvent) bool { return e.Event == tunnel.AuditNameServed })
	x := scrape(t, metrics)
	for series, want := range map[string]float64{
		`plug_run{run="run-m",user="dev",key="` + fp + `",kind="serves"}`:                                1,
		`plug_name{name="checkout",port="80",protocol="tcp",mode="parked",run="run-m",key="` + fp + `"}`: 1,
		`plug_runs_open{kind="serves"}`:                   1,
		`plug_names_served{mode="parked",protocol="tcp"}`: 1,
		`plug_takeovers_total`:                            1,
		`plug_handshakes{state="waiting"}`:                0,
		`plug_build_info{version="` + tunnel.Version + `",goversion="` + runtime.Version() + `"}`: 1,
	} {
		if got, ok := x.samples[series]; !ok || got != want {
			t.Errorf("%s = %v (there: %v), want %v", series, got, ok, want)
		}
	}
	for _, family := range []string{"plug_refusals_total", "plug_caps_hit_total", "plug_bytes_through_total", "plug_runs_ended_total", "plug_handovers_total"} {
		if x.types[family] != "counter" {
			t.Errorf("no counter %s", family)
		}
	}
	s.Close()
	audit.Await(t, clustertest.Settle, "run.ended", func(e tunnel.AuditEvent) bool { return e.Event == tunnel.AuditRunEnded })
	x = scrape(t, metrics)
	if left := len(x.find("plug_run{")) + len(x.find("plug_name{")); left != 0 {
		t.Errorf("the ended run still has %d series", left)
	}
	if x.samples[`plug_runs_ended_total{how="goodbye"}`] != 1 || x.samples[`plug_runs_opened_total{kind="serves"}`] != 1 {
		t.Errorf("the counters of the run: %v %v", x.find("plug_runs_ended_total"), x.find("plug_runs_opened_total"))
	}
}
