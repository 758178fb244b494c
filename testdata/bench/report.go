package main

import (
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
)

// report turns the CSV of a bench run into Markdown on stdout: the tables,
// the ratios against the baselines of the same run, and the targets.
func report(args []string) error {
	fs := flag.NewFlagSet("report", flag.ExitOnError)
	csvPath := fs.String("csv", "", "the CSV run.sh wrote")
	machine := fs.String("machine", "", "the machine, one line")
	command := fs.String("command", "./build.sh bench", "the command that reproduces it")
	took := fs.Int("took", 0, "seconds the run took")
	wan := fs.String("wan", "", "how the wan profile's delay and loss were made")
	load := fs.String("load", "", "the machine's load averages (1, 5, 15 min) when the run began and ended")
	fs.Parse(args)
	f, err := os.Open(*csvPath)
	if err != nil {
		return err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return err
	}
	r := results{}
	for _, row := range rows[1:] {
		if len(row) == 4 {
			r[key{row[0], row[1], row[2]}] = row[3]
		}
	}
	if len(r) == 0 {
		return errors.New(*csvPath + " holds no results")
	}
	w := &markdown{r: r}
	w.header(*machine, *command, *wan, *load, *took)
	w.throughput()
	w.cpu()
	w.latency()
	w.setup()
	w.concurrent()
	w.udp()
	w.sessions()
	w.footprint()
	w.targets()
	w.failures()
	fmt.Print(w.b.String())
	return nil
}

type key struct{ profile, path, metric string }

type results map[key]string

// get returns a number, or NaN when it was not measured.
func (r results) get(profile, path, metric string) float64 {
	v, err := strconv.ParseFloat(r[key{profile, path, metric}], 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

var profiles = []struct{ name, label string }{
	{"none", "loopback"},
	{"wan", "20 ms RTT, 0.1 % loss"},
	{"wan100", "100 ms RTT, 0.1 % loss"},
}

// The baselines and plug, in the order of the tables' columns.
var columns = []struct{ path, label string }{
	{"raw", "raw TCP"},
	{"openssh", "OpenSSH"},
	{"openssh-agent", "OpenSSH → agent"},
	{"plug", "plug"},
}

type markdown struct {
	r     results
	b     strings.Builder
	unmet []string        // what limits each target not met
	told  map[string]bool // causes already in unmet
}

func (w *markdown) p(format string, a ...any) { fmt.Fprintf(&w.b, format+"\n", a...) }

func (w *markdown) header(machine, command, wan, load string, took int) {
	w.p("Measured by `%s` on %s; the run took %d min %d s.", command, machine, took/60, took%60)
	w.p("")
	if load != "" {
		w.p("The machine's cores are shared with other work, which weighs on every path of a run alike: compare the ratios of one run, not absolute figures across runs. "+
			"Load averages (1, 5, 15 min) at the start: %s.", load)
		w.p("")
	}
	w.p("Profiles: **loopback** joins the laptop (a network namespace) to the node by a veth pair; "+
		"**20 ms RTT, 0.1 %% loss** delays each direction 10 ms and loses 0.1 %% of the packets each way (%s); "+
		"**100 ms RTT, 0.1 %% loss** the same with 50 ms each way, for the paths only.", wan)
	w.p("")
	w.p("Paths: **raw TCP** goes straight to the pod (or from the pod to the laptop); " +
		"**OpenSSH** is `ssh -L` / `ssh -R` through an OpenSSH sshd on the node's side of the link (OpenSSH at both ends, its default cipher); " +
		"**OpenSSH → agent** is the same `ssh -L` / `ssh -R` through the plug agent; " +
		"**plug** is `plug -c` (consume: the laptop calls a Service by name) and `plug -s` (serve: a pod calls the name the laptop serves). " +
		"Ratios compare plug with raw TCP and with OpenSSH measured in the same run. " +
		"**UDP** goes to a UDP echo on the same ports: straight (laptop → the pod's address, pod → the laptop's address) " +
		"and through plug (`plug -c` to the Service's UDP port by name; `plug -s NAME:PORT:LOCAL/udp`, which a pod sends to by name).")
	w.p("")
}

// direction is a way the data of a throughput measurement flows: name
// starts its metrics (name+"_mbps"), label says it in a table.
type direction struct{ name, label string }

// directions are the two ways data flows.
var directions = []direction{{"l2p", "laptop → pod"}, {"p2l", "pod → laptop"}}

// oneWayFlow is the way a side's one-way UDP flows: from the sender, the
// laptop's program (consume) or a pod's (serve).
var oneWayFlow = map[string]direction{"consume": directions[0], "serve": directions[1]}

// udpLost is the cell of a UDP throughput measurement's lost datagrams:
// lost of sent, late, and those lost or late while the window was found.
func (w *markdown) udpLost(profile, path string) string {
	lost, sent := w.r.get(profile, path, "udp_lost"), w.r.get(profile, path, "udp_sent")
	cell := num("%.0f", lost) + " of " + num("%.0f", sent) + " (" + num("%.2f %%", 100*lost/sent) + ")"
	if late := w.r.get(profile, path, "udp_late"); late > 0 {
		cell += "; " + num("%.0f", late) + " late"
	}
	if finding := w.r.get(profile, path, "udp_lost_finding"); finding > 0 {
		cell += "; finding the window: " + num("%.0f", finding)
	}
	return cell
}

// udp writes the tables of the UDP paths: each side straight and through
// plug, with plug's ratio to straight.
func (w *markdown) udp() {
	w.table(fmt.Sprintf("UDP throughput: %d-byte datagrams kept in flight to an echo, one socket (each way at once)", udpDatagram),
		"| profile | side | straight Mbit/s | datagrams/s | lost | plug Mbit/s | datagrams/s | lost | plug ÷ straight | plug's TCP Mbit/s, faster way | plug's UDP ÷ TCP |", "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, pr := range profiles {
		for _, side := range []string{"consume", "serve"} {
			cells := []string{pr.label, side}
			for _, path := range []string{"udp-raw", "udp-plug"} {
				p := side + "/" + path
				cells = append(cells, num("%.0f", w.r.get(pr.name, p, "udp_mbps")), num("%.0f", w.r.get(pr.name, p, "udp_dps")), w.udpLost(pr.name, p))
			}
			udp := w.r.get(pr.name, side+"/udp-plug", "udp_mbps")
			tcp := max(w.r.get(pr.name, side+"/plug", "l2p_mbps"), w.r.get(pr.name, side+"/plug", "p2l_mbps"))
			cells = append(cells, percent(udp/w.r.get(pr.name, side+"/udp-raw", "udp_mbps")), num("%.0f", tcp), percent(udp/tcp))
			w.p("| %s |", strings.Join(cells, " | "))
		}
	}
	w.p("")
	w.p("Straight: the laptop sends to the pod's address (consume), a pod to the laptop's (serve). " +
		"plug: the laptop's program, run by `plug -c`, sends to the Service `benchsrv`'s UDP port by name (consume); " +
		"a pod sends to `benchudp`, which `plug -s benchudp:9000:9001/udp` serves with the laptop's echo (serve). " +
		"The sender keeps as many datagrams in flight as the path carries without a queue forming (its window grows while the fastest echo of a round stays near the fastest of all and the round lost no more than 1 + 1 %% of its datagrams, and shrinks when not, never below 1,024: testdata/bench/README.md); " +
		"Mbit/s and datagrams/s count the echoes, so both directions carry that much at once. " +
		"plug's TCP: one connection through plug on the same side in the same run, the faster of its two directions (the throughput table). " +
		"*Lost*: sent and never echoed; *late*: echoed after the sender had given up on it (no echo within 4 round trips, at least 200 ms) and sent another in its place; both count the datagrams sent in the measured 10 s. " +
		"*Finding the window*: lost or late among those sent before: while the sender's window grew until a queue on the path overflowed, as it does on purpose, and in the second after, while that queue drained.")
	w.p("")
	w.table(fmt.Sprintf("UDP throughput one way: %d-byte datagrams kept in flight, each acknowledged by %d bytes, one socket", udpDatagram, udpAckSize),
		"| profile | side | data flows | straight Mbit/s | lost | plug Mbit/s | lost | plug ÷ straight | plug's TCP Mbit/s, same way | plug's UDP ÷ TCP |", "|---|---|---|--:|--:|--:|--:|--:|--:|--:|")
	for _, pr := range profiles {
		for _, side := range []string{"consume", "serve"} {
			raw, plug := side+"/udp-raw"+oneWay, side+"/udp-plug"+oneWay
			udp := w.r.get(pr.name, plug, "udp_mbps")
			tcp := w.r.get(pr.name, side+"/plug", oneWayFlow[side].name+"_mbps")
			w.p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |", pr.label, side, oneWayFlow[side].label,
				num("%.0f", w.r.get(pr.name, raw, "udp_mbps")), w.udpLost(pr.name, raw),
				num("%.0f", udp), w.udpLost(pr.name, plug),
				percent(udp/w.r.get(pr.name, raw, "udp_mbps")), num("%.0f", tcp), percent(udp/tcp))
		}
	}
	w.p("")
	w.p("The same paths and sender as above, but each datagram asks the echo for its first %d bytes back, not the whole datagram: "+
		"the data flows one way, as in a TCP transfer, and the other way carries an acknowledgment per datagram (1.3 %% of the bytes), which the window, *lost* and *late* count as the echo above. "+
		"Mbit/s counts the datagrams acknowledged. plug's TCP: one connection through plug on the same side in the same run, the data flowing the same way (the throughput table).", udpAckSize)
	w.p("")
	w.table("UDP round trip: one 64-byte datagram at a time, p50 / p99 (µs)",
		"| profile | side | straight | plug | plug adds (p50) | plug ÷ straight (p50) | lost, straight; plug |", "|---|---|--:|--:|--:|--:|--:|")
	for _, pr := range profiles {
		for _, side := range []string{"consume", "serve"} {
			raw, plug := w.r.get(pr.name, side+"/udp-raw", "rr_p50_us"), w.r.get(pr.name, side+"/udp-plug", "rr_p50_us")
			lost := func(path string) string {
				p := side + "/" + path
				return num("%.0f", w.r.get(pr.name, p, "rr_lost")) + " of " + num("%.0f", w.r.get(pr.name, p, "rr_lost")+w.r.get(pr.name, p, "rr_n"))
			}
			w.p("| %s | %s | %s | %s | %s | %s | %s; %s |", pr.label, side, w.quantiles("rr")(pr.name, side+"/udp-raw"), w.quantiles("rr")(pr.name, side+"/udp-plug"),
				num("%+.0f", plug-raw), times(plug/raw), lost("udp-raw"), lost("udp-plug"))
		}
	}
	w.p("")
	w.p("Taken in the same turns as the TCP round trips, the same number per path; a datagram with no echo within 1 s is lost and not counted in the round trips.")
	w.p("")
}

func (w *markdown) throughput() {
	w.table("Throughput, one connection (Mbit/s)",
		"| profile | side | data flows | raw TCP | OpenSSH | OpenSSH → agent | plug | plug ÷ raw | plug ÷ OpenSSH |", "|---|---|---|--:|--:|--:|--:|--:|--:|")
	for _, pr := range profiles {
		for _, side := range []string{"consume", "serve"} {
			for _, dir := range directions {
				metric := dir.name + "_mbps"
				cells := w.cells(pr.name, side, metric, "%.0f")
				raw, ssh, plug := w.r.get(pr.name, side+"/raw", metric), w.r.get(pr.name, side+"/openssh", metric), w.r.get(pr.name, side+"/plug", metric)
				w.p("| %s | %s | %s | %s | %s | %s |", pr.label, side, dir.label, strings.Join(cells, " | "), percent(plug/raw), times(plug/ssh))
			}
		}
	}
	w.p("")
}

// cpu writes the table of the CPU time both ends of each tunnel spent per
// GiB it carried, in the throughput transfers.
func (w *markdown) cpu() {
	w.table("CPU per GiB carried, both ends of the tunnel (s of user + system time; laptop's end + cluster's end)",
		"| profile | side | data flows | OpenSSH | OpenSSH → agent | plug | plug ÷ OpenSSH |", "|---|---|---|--:|--:|--:|--:|")
	for _, pr := range profiles {
		for _, side := range []string{"consume", "serve"} {
			for _, dir := range directions {
				cells := []string{pr.label, side, dir.label}
				for _, path := range []string{"openssh", "openssh-agent", "plug"} {
					get := func(metric string) float64 { return w.r.get(pr.name, side+"/"+path, dir.name+metric) }
					cells = append(cells, num("%.2f", get("_cpu_s_per_gib"))+" ("+num("%.2f", get("_cpu_laptop_s_per_gib"))+" + "+num("%.2f", get("_cpu_cluster_s_per_gib"))+")")
				}
				cells = append(cells, times(w.cpuRatio(pr.name, side, dir.name)))
				w.p("| %s |", strings.Join(cells, " | "))
			}
		}
	}
	w.p("")
	w.p("Read from /proc on the node (the machine's one PID namespace holds the laptop's processes, the agent's and the sshd's) before each throughput transfer opens its connection and after the far end has its last byte, summed over the turns: " +
		"OpenSSH: `ssh` + the bench sshd with its per-connection processes; OpenSSH → agent: `ssh` + the agent; plug: `plug -c` or the `plug -s` run + the agent. " +
		"The bench tool's own processes, which send and receive the bytes, are not counted; the agent also holds the other paths' idle sessions.")
	w.p("")
}

// cpuRatio is plug's CPU per GiB over OpenSSH's, on one side and
// direction ("l2p", "p2l").
func (w *markdown) cpuRatio(profile, side, dir string) float64 {
	return w.r.get(profile, side+"/plug", dir+"_cpu_s_per_gib") / w.r.get(profile, side+"/openssh", dir+"_cpu_s_per_gib")
}

// cells formats metric for each column.
func (w *markdown) cells(profile, side, metric, format string) []string {
	var out []string
	for _, c := range columns {
		out = append(out, num(format, w.r.get(profile, side+"/"+c.path, metric)))
	}
	return out
}

func (w *markdown) latency() {
	w.table("Latency: 64-byte request and response on one connection, p50 / p99 (µs)",
		"| profile | side | raw TCP | OpenSSH | OpenSSH → agent | plug | plug adds (p50) | OpenSSH adds (p50) | plug ÷ OpenSSH, added |", "|---|---|--:|--:|--:|--:|--:|--:|--:|")
	w.pathRows(w.quantiles("rr"), func(profile, side string) []string {
		plugAdds, sshAdds := w.added(profile, side, "plug"), w.added(profile, side, "openssh")
		return []string{num("%+.0f", plugAdds), num("%+.0f", sshAdds), times(plugAdds / sshAdds)}
	})
	w.p("")
	w.p("Round trips per path: %s on loopback, %s at 20 ms, %s at 100 ms, taken in 10 turns in rotation with the other paths (at 20 and 100 ms, where a round trip is the link's delay, the paths take their turns at the same time).",
		num("%.0f", w.r.get("none", "consume/plug", "rr_n")), num("%.0f", w.r.get("wan", "consume/plug", "rr_n")), num("%.0f", w.r.get("wan100", "consume/plug", "rr_n")))
	w.p("")
}

// table begins a table: a heading of title, the header row and the row
// of the columns' alignment.
func (w *markdown) table(title, header, align string) {
	w.p("### %s", title)
	w.p("")
	w.p("%s", header)
	w.p("%s", align)
}

// pathRows writes a row per profile and side: its cell of each path of
// columns, then the cells more gives, if more is not nil.
func (w *markdown) pathRows(cell func(profile, path string) string, more func(profile, side string) []string) {
	for _, pr := range profiles {
		for _, side := range []string{"consume", "serve"} {
			cells := []string{pr.label, side}
			for _, c := range columns {
				cells = append(cells, cell(pr.name, side+"/"+c.path))
			}
			if more != nil {
				cells = append(cells, more(pr.name, side)...)
			}
			w.p("| %s |", strings.Join(cells, " | "))
		}
	}
}

// quantiles is the cell "p50 / p99" of the round trips named by metric
// (rr, conn) on a path.
func (w *markdown) quantiles(metric string) func(profile, path string) string {
	return func(profile, path string) string {
		return num("%.0f", w.r.get(profile, path, metric+"_p50_us")) + " / " + num("%.0f", w.r.get(profile, path, metric+"_p99_us"))
	}
}

// added is the p50 round trip of path less raw TCP's.
func (w *markdown) added(profile, side, path string) float64 {
	return w.r.get(profile, side+"/"+path, "rr_p50_us") - w.r.get(profile, side+"/raw", "rr_p50_us")
}

func (w *markdown) setup() {
	w.table("New connection, from connect to the first answer from the other end, p50 / p99 (µs)",
		"| profile | side | raw TCP | OpenSSH | OpenSSH → agent | plug |", "|---|---|--:|--:|--:|--:|")
	w.pathRows(w.quantiles("conn"), nil)
	w.p("")
	w.p("Through a tunnel the local connect succeeds at once; the time counts until the far end answered. " +
		"The agent dials a name, so plug's and OpenSSH → agent's include a cluster DNS lookup; the sshd dials the Service's address.")
	w.p("")
}

func (w *markdown) concurrent() {
	w.table("Concurrent connections through one session: answered of opened, time until the last answered",
		"| profile | side | raw TCP | OpenSSH | OpenSSH → agent | plug |", "|---|---|--:|--:|--:|--:|")
	w.pathRows(func(profile, path string) string {
		ok, fail := w.r.get(profile, path, "conc_ok"), w.r.get(profile, path, "conc_fail")
		return num("%.0f", ok) + "/" + num("%.0f", ok+fail) + ", " + num("%.0f", w.r.get(profile, path, "conc_ms")) + " ms"
	}, nil)
	w.p("")
}

func (w *markdown) sessions() {
	w.table("Session start and runs on one agent",
		"| profile | start, new name: p50 (max); served p50 | start, takeover: p50 (max); served p50 | cluster alone: p50 (max) | concurrent runs (alive after) | all answering after | requests / errors | agent RSS idle | agent RSS with the runs |", "|---|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, pr := range profiles[:2] { // wan100 measures the paths only
		start := func(path string) string {
			return num("%.0f", w.r.get(pr.name, path, "p50_ms")) + " ms (" + num("%.0f", w.r.get(pr.name, path, "max_ms")) + "); served " +
				num("%.0f", w.r.get(pr.name, path, "served_p50_ms")) + " ms"
		}
		floor := num("%.0f", w.r.get(pr.name, "start/floor", "p50_ms")) + " ms (" + num("%.0f", w.r.get(pr.name, "start/floor", "max_ms")) + ")"
		w.p("| %s | %s | %s | %s | %s (%s) | %s ms | %s / %s | %s MB | %s MB |", pr.label, start("start/new"), start("start/takeover"), floor,
			num("%.0f", w.r.get(pr.name, "runs", "runs")), num("%.0f", w.r.get(pr.name, "runs", "alive")),
			num("%.0f", w.r.get(pr.name, "runs", "ready_ms")),
			num("%.0f", w.r.get(pr.name, "runs", "ops")), num("%.0f", w.r.get(pr.name, "runs", "errors")),
			num("%.1f", w.r.get(pr.name, "agent", "rss_idle_mb")), num("%.1f", w.r.get(pr.name, "agent", "rss_runs_mb")))
	}
	w.p("")
	w.p("Session start: from starting `plug -s NAME:80:LOCAL -- CMD` to the first request of a pod reaching CMD, p50 over %s runs; "+
		"*served*: until plug said the agent serves the name; the rest is the cluster programming the Service. "+
		"*Cluster alone*: a Service and an EndpointSlice created with kubectl as the agent creates them, from the moment both exist until a pod's request reaches the endpoint: the floor of a new name that plug does not control (kube-proxy applies changes at most about once a second). "+
		"The pod finds the Service's address in the API, not in DNS, so the cluster DNS's negative cache of a name asked for before it existed does not count. "+
		"Runs: each `plug -s` serves a name of its own; a pod keeps two connections per name busy with small requests for 5 s. "+
		"RSS: the agent's process, read from /proc on the node.", num("%.0f", w.r.get("none", "start/new", "runs")))
	w.p("")
}

func (w *markdown) footprint() {
	w.table("Footprint",
		"| what | size |", "|---|--:|")
	for _, p := range []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64", "windows/amd64", "windows/arm64"} {
		w.p("| binary %s | %s MB |", p, num("%.1f", w.r.get("-", "footprint", "binary "+p)/1e6))
	}
	mb := func(metric string) string { return num("%.1f", w.r.get("-", "footprint", metric)/1e6) }
	w.p("| agent image linux/amd64 (archive; gzip) | %s MB; %s MB |", mb("image"), mb("image gzip"))
	w.p("| agent image linux/arm64 (archive; gzip) | %s MB; %s MB |", mb("image arm64"), mb("image arm64 gzip"))
	w.p("| image index, both architectures (OCI archive, layers gzipped) | %s MB |", mb("image index"))
	w.p("| installer download linux/amd64 (the gzipped binary) | %s MB |", mb("installer download linux/amd64"))
	w.p("| packages outside the standard library | %s (golang.org/x/crypto %s, golang.org/x/sys %s); plug's own: %s |",
		num("%.0f", w.r.get("-", "footprint", "packages outside the standard library")),
		num("%.0f", w.r.get("-", "footprint", "packages golang.org/x/crypto")), num("%.0f", w.r.get("-", "footprint", "packages golang.org/x/sys")),
		num("%.0f", w.r.get("-", "footprint", "packages plug")))
	w.p("")
	w.p("The image holds the agent and the CLI binaries for every platform it serves to the installer, gzipped; the two architectures' images share the layer of the CLI binaries. " +
		"Before the CLI binaries were stored gzipped, the image (linux/amd64 only) was 86.3 MB, 34.6 MB gzipped, and the installer downloaded the 12.8 MB binary.")
	w.p("")
}

// What limits plug where a target is not met: plug's design and the
// machine, as profiling found them (testdata/bench/README.md).
const (
	whyCiphers = "Both tunnels encrypt and copy every byte on the same 2 cores as the laptop's program, the pod and the machine's other work. " +
		"Where it falls behind differs from run to run (a direction's figure moves by up to ±30 % between runs, OpenSSH's too): x/crypto/ssh's receiving end " +
		"copies every packet into a new buffer and hands it through two goroutines before the channel's reader has it, so the receiving end of plug is the slower one. " +
		"On the serve side the pod also reaches OpenSSH's sshd on the node's own address, but plug's agent through a Service (translated on every packet) and a pod's veth."
	whyRaw = "Raw TCP between two network namespaces hands 64 KiB segments from socket to socket inside the kernel; " +
		"a tunnel adds two processes that read, encrypt or decrypt and write every byte: OpenSSH reaches the same fraction."
	whyWindow = "x/crypto/ssh gives every channel a fixed 2 MiB window (64 packets of 32 KiB, not configurable): one channel never has more than 2 MiB in flight, " +
		"at most 2 MiB per round trip (about 780 Mbit/s at 21.5 ms, 160 Mbit/s at 100 ms), and each lost packet stalls that window for a round trip while TCP repairs it. " +
		"OpenSSH has the same 2 MiB window. plug stripes a connection over up to 8 channels (tunnel/stripe.go), adding one when the sender waits on the ones it has; " +
		"what is left is the one TCP connection under all of them, which stalls every channel at once for each lost packet."
	whyHandoffs = "x/crypto/ssh passes each packet it receives from its reading goroutine to the connection's dispatcher and then to the channel's reader: " +
		"three goroutines per hop at each end, where OpenSSH's single loop reads and writes. On 2 cores shared with other work each hand-off costs tens of µs."
	whyKubeProxy = "plug serves the name within the *served* time above; the rest is the cluster programming a new Service, " +
		"which takes as long with kubectl alone (*cluster alone*): kube-proxy applies changes at most about once a second."
)

// targets compares the run with the goals of the tunnel, and says what
// limits each one not met.
func (w *markdown) targets() {
	w.table("Targets",
		"| target | measured | met |", "|---|---|:-:|")
	throughput := func(profile, base string) float64 {
		worst := math.Inf(1)
		for _, side := range []string{"consume", "serve"} {
			for _, m := range []string{"l2p_mbps", "p2l_mbps"} {
				worst = math.Min(worst, w.r.get(profile, side+"/plug", m)/w.r.get(profile, side+"/"+base, m))
			}
		}
		return worst
	}
	worstOver := func(f func(side string) float64) float64 {
		return math.Max(f("consume"), f("serve"))
	}
	v := throughput("none", "openssh")
	w.target("throughput ≥ 1.0× OpenSSH, loopback (worst of 4)", times(v), v >= 1.0, whyCiphers)
	v = math.Max(math.Max(w.cpuRatio("none", "consume", "l2p"), w.cpuRatio("none", "consume", "p2l")),
		math.Max(w.cpuRatio("none", "serve", "l2p"), w.cpuRatio("none", "serve", "p2l")))
	w.target("CPU per GiB ≤ 1.0× OpenSSH's, loopback (worst of 4)", times(v), v <= 1.0, whyCiphers)
	v = throughput("none", "raw")
	w.target("throughput ≥ 50 % of raw TCP, loopback (worst of 4)", percent(v), v >= 0.5, whyRaw)
	v = throughput("wan", "raw")
	w.target("throughput ≥ 90 % of raw TCP at 20 ms RTT, 0.1 % loss (worst of 4)", percent(v), v >= 0.9, whyWindow)
	v = throughput("wan100", "raw")
	w.target("throughput ≥ 80 % of raw TCP at 100 ms RTT, 0.1 % loss (worst of 4)", percent(v), v >= 0.8, whyWindow)
	v = worstOver(func(side string) float64 { return w.added("none", side, "plug") / w.added("none", side, "openssh") })
	w.target("added latency ≤ 1.1× OpenSSH's, loopback p50 (worse side)", times(v), v <= 1.1, whyHandoffs)
	v = worstOver(func(side string) float64 { return w.added("none", side, "plug") })
	w.target("p50 ≤ 150 µs over raw TCP, loopback (worse side)", num("%+.0f µs", v), v <= 150, whyHandoffs)
	for _, kind := range []struct{ path, label string }{{"start/new", "new name"}, {"start/takeover", "takeover"}} {
		v = math.Max(w.r.get("none", kind.path, "p50_ms"), w.r.get("wan", kind.path, "p50_ms"))
		w.target("session start ≤ 1 s p50, "+kind.label+" (worse profile)", num("%.0f ms", v), v <= 1000, whyKubeProxy)
	}
	for _, pr := range profiles[:2] {
		v = worstOver(func(side string) float64 {
			return -w.r.get(pr.name, side+"/udp-plug", "udp_mbps") / max(w.r.get(pr.name, side+"/plug", "l2p_mbps"), w.r.get(pr.name, side+"/plug", "p2l_mbps"))
		})
		w.target("UDP echoed through plug (both ways at once) ≥ 50 % of TCP through plug, "+pr.label+" (worse side)", percent(-v), -v >= 0.5, "")
		v = worstOver(func(side string) float64 {
			return -w.r.get(pr.name, side+"/udp-plug"+oneWay, "udp_mbps") / w.r.get(pr.name, side+"/plug", oneWayFlow[side].name+"_mbps")
		})
		w.target("UDP one way through plug ≥ 50 % of TCP through plug the same way, "+pr.label+" (worse side)", percent(-v), -v >= 0.5, "")
	}
	lostOrLate := func(side, path string) float64 {
		p := side + "/" + path
		return (w.r.get("wan", p, "udp_lost") + w.r.get("wan", p, "udp_late")) / w.r.get("wan", p, "udp_sent")
	}
	v = worstOver(func(side string) float64 { return lostOrLate(side, "udp-plug") / lostOrLate(side, "udp-raw") })
	w.target("UDP lost or late through plug ≤ 2× straight, 20 ms RTT (worse side)", times(v), v <= 2, "")
	fails, opened := 0.0, 0.0
	for _, pr := range profiles {
		for _, side := range []string{"consume", "serve"} {
			fails += w.r.get(pr.name, side+"/plug", "conc_fail")
			opened += w.r.get(pr.name, side+"/plug", "conc_ok") + w.r.get(pr.name, side+"/plug", "conc_fail")
		}
	}
	w.target("1,000 concurrent connections, 0 failures (both sides, both profiles)", num("%.0f", fails)+" failed of "+num("%.0f", opened), fails == 0, "")
	v = math.Max(w.r.get("none", "agent", "rss_idle_mb"), w.r.get("wan", "agent", "rss_idle_mb"))
	w.target("agent RSS ≤ 30 MB idle", num("%.1f MB", v), v <= 30, "")
	v = math.Max(w.r.get("none", "agent", "rss_runs_mb"), w.r.get("wan", "agent", "rss_runs_mb"))
	runs := w.r.get("none", "runs", "runs")
	w.target("agent RSS ≤ 100 MB with 50 runs", num("%.1f MB", v)+" with "+num("%.0f", runs), v <= 100 && runs >= 50, "")
	v = w.r.get("-", "footprint", "binary linux/amd64") / 1e6
	w.target("linux/amd64 binary ≤ 15 MB", num("%.1f MB", v), v <= 15, "")
	w.p("")
	if len(w.unmet) == 0 {
		return
	}
	w.p("What limits the targets not met:")
	w.p("")
	for _, u := range w.unmet {
		w.p("- %s", u)
	}
	w.p("")
}

// target writes one row; a target not met with a known cause gets it in
// the list after the table (once per cause).
func (w *markdown) target(what, measured string, met bool, why string) {
	mark := "no"
	if met {
		mark = "yes"
	}
	if strings.Contains(measured, "—") {
		mark = "—"
	}
	w.p("| %s | %s | %s |", what, measured, mark)
	if mark == "no" && why != "" && !w.told[why] {
		if w.told == nil {
			w.told = map[string]bool{}
		}
		w.told[why] = true
		w.unmet = append(w.unmet, "**"+what+"**: "+why)
	}
}

// failures lists the measurements that failed, if any.
func (w *markdown) failures() {
	var lines []string
	for k, v := range w.r {
		if k.metric == "error" {
			lines = append(lines, fmt.Sprintf("- %s, %s: %s", k.profile, k.path, v))
		}
	}
	if len(lines) == 0 {
		return
	}
	w.p("### Failed measurements")
	w.p("")
	for _, l := range lines {
		w.p("%s", l)
	}
	w.p("")
}

func num(format string, v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "—"
	}
	return fmt.Sprintf(format, v)
}

func percent(v float64) string { return num("%.0f %%", v*100) }
func times(v float64) string   { return num("%.2f×", v) }
