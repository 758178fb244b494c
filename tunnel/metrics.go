package tunnel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The agent's metrics, in the Prometheus text exposition format (version
// 0.0.4), served by ServeMetrics on an address of its own
// (PLUG_METRICS_ADDR, off by default). deploy/README.md "Metrics" lists
// each family and what to alert on.
//
// What happens to runs and names is counted from the audit trail
// (Metrics.Observe, beside the audit sink); what happens below it (caps
// reached, bytes through the agent, connections refused busy) by
// counters of this package; the platform's own (API errors, sweep
// actions) by MetricsPlatform.

// Label is one label of a Sample.
type Label struct{ Name, Value string }

// Sample is one value of a metric family, with its labels.
type Sample struct {
	Labels []Label
	Value  float64
}

// MetricFamily is a metric: its name, HELP text, TYPE (counter or gauge)
// and samples.
type MetricFamily struct {
	Name, Help, Type string
	Samples          []Sample
}

// MetricsPlatform is a Platform that counts its own work: PlatformMetrics
// returns its families (kubeplatform: API errors, sweep actions).
type MetricsPlatform interface {
	Platform
	PlatformMetrics() []MetricFamily
}

// counters are this package's counts below the audit trail, for every
// agent of the process (one, in plug agent).
var counters struct {
	bytes atomic.Uint64 // bytes copied through the agent, both ways
	mu    sync.Mutex
	caps  map[string]uint64 // caps reached, by setting
	// refusals are what was refused, by reason, but for caps and busy
	refusals map[string]uint64
	busy     atomic.Uint64 // connections refused over the handshake caps
}

// countRefusal counts a refusal, by its reason.
func countRefusal(reason string) {
	counters.mu.Lock()
	defer counters.mu.Unlock()
	if counters.refusals == nil {
		counters.refusals = map[string]uint64{}
	}
	counters.refusals[reason]++
}

// countCap counts a cap reached, by its setting.
func countCap(setting string) {
	counters.mu.Lock()
	defer counters.mu.Unlock()
	if counters.caps == nil {
		counters.caps = map[string]uint64{}
	}
	counters.caps[setting]++
}

// Metrics counts an agent's runs and names from its audit trail: pass
// Observe the events the agent hands its Audit sink. The zero Metrics is
// ready. Open runs and served names are one sample each, labelled: at most
// the agent's caps of them (PLUG_MAX_CONNECTIONS runs, names per key).
type Metrics struct {
	mu       sync.Mutex
	opened   map[string]uint64 // runs opened, by kind
	ended    map[string]uint64 // runs ended, by how
	runs     map[string]AuditEvent
	names    map[string]AuditEvent // by run, name, port and protocol
	parked   uint64
	volumes  uint64
	envReads uint64
}

// Observe counts one audit event.
func (m *Metrics) Observe(e AuditEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.runs == nil {
		m.opened, m.ended = map[string]uint64{}, map[string]uint64{}
		m.runs, m.names = map[string]AuditEvent{}, map[string]AuditEvent{}
	}
	name := e.Run + "\x00" + e.Name + "\x00" + strconv.Itoa(e.Port) + "\x00" + protocolOf(e.UDP)
	switch e.Event {
	case AuditRunOpened:
		m.opened[e.Kind]++
		m.runs[e.Run] = e
	case AuditRunEnded:
		m.ended[e.How]++
		delete(m.runs, e.Run)
		for k := range m.names {
			if strings.HasPrefix(k, e.Run+"\x00") {
				delete(m.names, k)
			}
		}
	case AuditNameServed:
		m.names[name] = e
		if e.Mode == ModeParked {
			m.parked++
		}
	case AuditNameBack:
		delete(m.names, name)
	case AuditVolumeServed:
		m.volumes++
	case AuditEnvRead:
		m.envReads++
	}
}

func protocolOf(udp bool) string {
	if udp {
		return "udp"
	}
	return "tcp"
}

// families are m's metric families, with the agent's handshakes and the
// package's counters.
func (m *Metrics) families(a *Agent) []MetricFamily {
	m.mu.Lock()
	byKind := func(counts map[string]uint64, label string) []Sample {
		var out []Sample
		for k, n := range counts {
			out = append(out, Sample{Labels: []Label{{label, k}}, Value: float64(n)})
		}
		return out
	}
	open := map[string]uint64{}
	var runs, names []Sample
	for _, r := range m.runs {
		open[r.Kind]++
		runs = append(runs, Sample{Labels: []Label{{"run", r.Run}, {"user", r.User}, {"key", r.Key}, {"kind", r.Kind}}, Value: 1})
	}
	served := map[[2]string]uint64{}
	for _, n := range m.names {
		served[[2]string{n.Mode, protocolOf(n.UDP)}]++
		names = append(names, Sample{Labels: []Label{{"name", n.Name}, {"port", strconv.Itoa(n.Port)}, {"protocol", protocolOf(n.UDP)}, {"mode", n.Mode}, {"run", n.Run}, {"key", n.Key}}, Value: 1})
	}
	var servedSamples []Sample
	for k, n := range served {
		servedSamples = append(servedSamples, Sample{Labels: []Label{{"mode", k[0]}, {"protocol", k[1]}}, Value: float64(n)})
	}
	refused := map[string]uint64{}
	fams := []MetricFamily{
		{"plug_runs_open", "Runs open on this agent, by kind (serves, consumes, openssh).", "gauge", byKind(open, "kind")},
		{"plug_run", "One sample per run open on this agent: its id, account, key fingerprint and kind.", "gauge", runs},
		{"plug_runs_opened_total", "Runs opened on this agent, by kind.", "counter", byKind(m.opened, "kind")},
		{"plug_runs_ended_total", "Runs ended on this agent, by how (goodbye, dropped, ended, key_removed, closed, agent_stopped, moved).", "counter", byKind(m.ended, "how")},
		{"plug_names_served", "Names runs serve through this agent, by mode (parked: a takeover; added: a new name) and protocol.", "gauge", servedSamples},
		{"plug_name", "One sample per name a run serves through this agent: name, port, protocol, mode, run and key.", "gauge", names},
		{"plug_takeovers_total", "Names served by taking over a deployed service (parking it).", "counter", []Sample{{Value: float64(m.parked)}}},
		{"plug_handovers_total", "Runs handed over to another agent replica when this one stopped.", "counter", []Sample{{Value: float64(m.ended[EndMoved])}}},
		{"plug_volumes_served_total", "Workload volumes served to runs by helpers.", "counter", []Sample{{Value: float64(m.volumes)}}},
		{"plug_env_reads_total", "Workload environments read for runs (--env-from).", "counter", []Sample{{Value: float64(m.envReads)}}},
	}
	m.mu.Unlock()

	counters.mu.Lock()
	for reason, n := range counters.refusals {
		refused[reason] += n
	}
	caps := byKind(counters.caps, "cap")
	capsHit := uint64(0)
	for _, n := range counters.caps {
		capsHit += n
	}
	counters.mu.Unlock()
	refused["cap"] += capsHit
	refused["busy"] += counters.busy.Load()
	held, waiting := a.handshakes()
	fams = append(fams,
		MetricFamily{"plug_refusals_total", "Connections and requests refused, by reason: admission (a key not admitted, counted at most once a minute per key), denied (a denied key, likewise), cap (a cap reached), busy (over the handshake caps), open_serve, open_takeover, open_env_secrets, open_volumes (the switches that narrow open admission).", "counter", byKind(refused, "reason")},
		MetricFamily{"plug_caps_hit_total", "Times a cap was reached, by the setting that raises it (PLUG_MAX_...), or for a fixed cap its name: volumes_per_run, env_reads_at_once, pending_requests.", "counter", caps},
		MetricFamily{"plug_handshakes", "Connections not yet authenticated: in handshake (held) and queued for a slot (waiting).", "gauge", []Sample{
			{Labels: []Label{{"state", "held"}}, Value: float64(held)}, {Labels: []Label{{"state", "waiting"}}, Value: float64(waiting)}}},
		MetricFamily{"plug_bytes_through_total", "Bytes copied through the agent, both ways, for runs' connections.", "counter", []Sample{{Value: float64(counters.bytes.Load())}}},
		MetricFamily{"plug_build_info", "The agent's build: version and Go version.", "gauge", []Sample{{Labels: []Label{{"version", Version}, {"goversion", runtime.Version()}}, Value: 1}}},
	)
	if mp, ok := a.Platform.(MetricsPlatform); ok {
		fams = append(fams, mp.PlatformMetrics()...)
	}
	return fams
}

// WriteExposition writes fams in the text exposition format: each
// family's HELP and TYPE, then its samples, families and samples in a
// stable order; label values escaped (backslash, quote, line feed).
func WriteExposition(w io.Writer, fams []MetricFamily) error {
	var b strings.Builder
	for _, f := range fams {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", f.Name, escapeHelp(f.Help), f.Name, f.Type)
		lines := make([]string, 0, len(f.Samples))
		for _, s := range f.Samples {
			line := f.Name
			if len(s.Labels) > 0 {
				parts := make([]string, len(s.Labels))
				for i, l := range s.Labels {
					parts[i] = l.Name + `="` + escapeLabel(l.Value) + `"`
				}
				line += "{" + strings.Join(parts, ",") + "}"
			}
			lines = append(lines, line+" "+strconv.FormatFloat(s.Value, 'g', -1, 64)+"\n")
		}
		slices.Sort(lines)
		for _, l := range lines {
			b.WriteString(l)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

var (
	labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)

func escapeLabel(s string) string { return labelEscaper.Replace(s) }
func escapeHelp(s string) string  { return helpEscaper.Replace(s) }

// ServeMetrics serves a's metrics (m) at /metrics on l until ctx ends:
// GET only, nothing else. Each scrape is bounded in time.
func ServeMetrics(ctx context.Context, l net.Listener, a *Agent, m *Metrics) error {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		WriteExposition(w, m.families(a))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, MaxHeaderBytes: 8 << 10}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
