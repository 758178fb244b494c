package main

import (
	"encoding/csv"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// scaleReport turns the rows of benchtool names into the Markdown section
// of RESULTS.md (stdout) and the plot it shows (-svg): run start and the
// agent's memory against the number of Services in the namespace.
func scaleReport(args []string) error {
	fs := flag.NewFlagSet("scalereport", flag.ExitOnError)
	in := fs.String("csv", "", "the rows of benchtool names")
	svg := fs.String("svg", "", "where to write the plot")
	svgName := fs.String("svg-link", "scale.svg", "the plot's name as the section links it")
	command := fs.String("command", "", "the command that measured")
	fs.Parse(args)
	f, err := os.Open(*in)
	if err != nil {
		return err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return err
	}
	v := map[string]float64{} // section/count/metric
	var counts []int
	for _, r := range rows {
		if len(r) != 4 {
			continue
		}
		x, err := strconv.ParseFloat(r[3], 64)
		if err != nil {
			continue
		}
		v[r[0]+"/"+r[1]+"/"+r[2]] = x
		if n, _ := strconv.Atoi(r[1]); r[0] == "size" && !slices.Contains(counts, n) {
			counts = append(counts, n)
		}
	}
	slices.Sort(counts)
	if len(counts) == 0 {
		return fmt.Errorf("%s has no measurement by namespace size", *in)
	}
	get := func(section string, n int, metric string) float64 {
		x, ok := v[section+"/"+strconv.Itoa(n)+"/"+metric]
		if !ok {
			return math.NaN()
		}
		return x
	}
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	p("### Cost against the cluster's size")
	p("")
	p("| Services in the namespace | `plug -c -- true`: p50 (max) | against 1 Service | `plug -c -- getent hosts NAME`: p50 (max) | against 1 Service | agent RSS |")
	p("|--:|--:|--:|--:|--:|--:|")
	base, lookupBase := get("size", counts[0], "start_p50_ms"), get("size", counts[0], "lookup_p50_ms")
	for _, n := range counts {
		p("| %s | %s ms (%s) | %s | %s ms (%s) | %s | %s MB |", thousands(n), num("%.0f", get("size", n, "start_p50_ms")), num("%.0f", get("size", n, "start_max_ms")),
			times(get("size", n, "start_p50_ms")/base), num("%.0f", get("size", n, "lookup_p50_ms")), num("%.0f", get("size", n, "lookup_max_ms")),
			times(get("size", n, "lookup_p50_ms")/lookupBase), num("%.1f", get("size", n, "rss_mb")))
	}
	p("")
	last := counts[len(counts)-1]
	if last > counts[0] {
		p("Each Service costs the agent %s KB of resident memory (%s MB with %s, %s MB with %s).", num("%.1f", (get("size", last, "rss_mb")-get("size", counts[0], "rss_mb"))*1000/float64(last-counts[0])),
			num("%.1f", get("size", counts[0], "rss_mb")), thousands(counts[0]), num("%.1f", get("size", last, "rss_mb")), thousands(last))
		p("")
	}
	at := slices.IndexFunc(counts, func(n int) bool { return !math.IsNaN(get("runs", n, "runs")) })
	if at >= 0 {
		last := counts[at]
		runs := get("runs", last, "runs")
		p("| with %s Services | measured |", thousands(last))
		p("|---|--:|")
		p("| %.0f runs started, 16 at a time: start p50 / p99 (failed to start) | %s / %s ms (%s) |", runs, num("%.0f", get("runs", last, "start_p50_ms")), num("%.0f", get("runs", last, "start_p99_ms")), num("%.0f", get("runs", last, "failed")))
		p("| their command resolved a Service that exists (the first lookup, which waits for the list of names), from the start: p50 / p99 | %s / %s ms |", num("%.0f", get("runs", last, "ready_p50_ms")), num("%.0f", get("runs", last, "ready_p99_ms")))
		p("| agent RSS with them (peak); each run | %s MB; %s KB |", num("%.1f", get("runs", last, "rss_mb")), num("%.0f", (get("runs", last, "rss_mb")-get("size", last, "rss_mb"))*1000/(runs-get("runs", last, "failed"))))
		p("| agent CPU per run started | %s ms |", num("%.1f", get("runs", last, "cpu_ms_per_run")))
		p("| one Service created: every run resolves it after kubectl returned, p50 / max | %s / %s ms |", num("%.0f", get("change", last, "resolved_p50_ms")), num("%.0f", get("change", last, "resolved_max_ms")))
		p("| what the agent sent each run for it | %s bytes |", num("%.0f", get("change", last, "bytes_per_run")))
		p("| agent RSS fresh; idle after the runs | %s MB; %s MB |", num("%.1f", get("agent", 0, "rss_fresh_mb")), num("%.1f", get("agent", last, "rss_after_mb")))
		p("")
	}
	p("![run start and agent memory against the namespace's size](%s)", *svgName)
	p("")
	p("Measured by `%s` on the local Kubernetes: the CLI on the node itself, the agent of deploy/plug-k8s.yaml in a namespace of its own, the Services headless (no ClusterIP, so kube-proxy programs nothing) with two ports and no pods. Start: from starting `plug -c -- true` (a command that looks no name up) to its exit, %s starts per size, then as many of `plug -c -- getent hosts NAME` (one that looks up the last Service made), which asks for the agent's list of names. The runs: `plug -c -- benchtool seen NAME KNOWN`, 16 starting at any time (the runs all come from one address and set up their names on one machine); start is until the command ran; then each resolves KNOWN, the last Service made, and once every run has, NAME is created. Bytes: what the agent sent on its runs' SSH connections (their sockets' counters) between the Service's creation and the last run resolving it, beyond what it sends them in quiet seconds.", *command, num("%.0f", get("size", counts[0], "starts")))
	fmt.Print(b.String())
	if *svg != "" {
		return os.WriteFile(*svg, plot(counts, get), 0o644)
	}
	return nil
}

// plot draws two panels, start p50 and agent RSS, against the namespace's
// size on a logarithmic axis.
func plot(counts []int, get func(string, int, string) float64) []byte {
	const w, h, pad = 360, 240, 48
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", 2*w, h)
	colors := []string{"#1f77b4", "#ff7f0e"}
	// panel draws metrics, one line each, in colors' order.
	panel := func(x0 int, title string, metrics []string, unit string) {
		series := make([][]float64, len(metrics))
		top := 0.0
		for i, metric := range metrics {
			for _, n := range counts {
				y := get("size", n, metric)
				series[i] = append(series[i], y)
				if !math.IsNaN(y) {
					top = max(top, y)
				}
			}
		}
		top = niceCeil(top)
		lx := func(n int) float64 {
			span := math.Log10(float64(max(counts[len(counts)-1], 10)))
			return float64(x0+pad) + math.Log10(float64(n))/span*float64(w-2*pad)
		}
		ly := func(y float64) float64 { return float64(h-pad) - y/top*float64(h-2*pad) }
		fmt.Fprintf(&b, `<text x="%d" y="20" font-size="13">%s</text>`+"\n", x0+pad, title)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", x0+pad, h-pad, x0+w-pad, h-pad)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", x0+pad, pad, x0+pad, h-pad)
		for i := 0; i <= 4; i++ {
			y := top * float64(i) / 4
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", x0+pad-4, ly(y)+4, strconv.FormatFloat(y, 'f', -1, 64))
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", x0+pad, ly(y), x0+w-pad, ly(y))
		}
		for _, n := range counts {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", lx(n), h-pad+14, thousands(n))
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">Services in the namespace</text>`+"\n", x0+w/2, h-pad+30)
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" transform="rotate(-90 %d %d)">%s</text>`+"\n", x0+12, h/2, x0+12, h/2, unit)
		for s, ys := range series {
			var pts []string
			for i, n := range counts {
				if !math.IsNaN(ys[i]) {
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", lx(n), ly(ys[i])))
					fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", lx(n), ly(ys[i]), colors[s])
				}
			}
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), colors[s])
		}
	}
	panel(0, "p50: plug -c -- true (blue), getent hosts NAME (orange)", []string{"start_p50_ms", "lookup_p50_ms"}, "ms")
	panel(w, "agent RSS", []string{"rss_mb"}, "MB")
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

// niceCeil rounds y up to 1, 2 or 5 times a power of ten.
func niceCeil(y float64) float64 {
	if y <= 0 || math.IsNaN(y) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(y)))
	for _, m := range []float64{1, 2, 5, 10} {
		if y <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// thousands writes n with a comma every three digits.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
