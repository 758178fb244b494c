package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A path is one way between the laptop and the cluster. The consume side
// is measured by a client on the laptop calling the bench server pod; the
// serve side by a client in a pod calling the laptop's bench server.
type path struct {
	name  string // e.g. "consume/plug"
	addr  string // what the client dials
	where string // "laptop", "plug -c" or "pod"
	udp   bool   // a UDP echo, measured by benchtool udp (else benchtool suite)
}

// paths measures every path: concurrency one path after the other, then
// throughput, latency and setup in turns.
//
//	raw            laptop → pod IP; pod → laptop IP: no tunnel
//	openssh        ssh -L / -R through an OpenSSH sshd on the node's address
//	               (beside the agent's NodePort): OpenSSH at both ends
//	openssh-agent  the same ssh -L / -R through the plug agent
//	plug           plug -c (the name benchsrv), plug -s (the name benchup)
//
// and UDP, to the UDP echo on the same ports:
//
//	udp-raw        laptop → pod IP; pod → laptop IP: no tunnel
//	udp-plug       plug -c (benchsrv's UDP port), plug -s …/udp (the name benchudp)
//
// UDP that does not start is a failed measurement; TCP goes on without it.
// With -only-udp only the UDP paths' throughput is measured, and beside it
// the TCP throughput of plug's paths, which it is compared with.
func (d *driver) paths() error {
	procs, err := d.startPaths()
	defer func() {
		if err := stopAll(procs, 20*time.Second); err != nil {
			d.logf("stopping: %v", err)
		}
	}()
	if err != nil {
		return err
	}
	udpProcs, err := d.startUDP()
	procs = append(procs, udpProcs...)
	var udp []path
	if err != nil {
		d.fail("udp", err)
	} else {
		udp = d.udpPaths()
	}
	clusterPort := strconv.Itoa(serverPort)
	all := []path{
		{"consume/raw", d.serverIP + ":" + clusterPort, "laptop", false},
		{"consume/openssh", "127.0.0.1:" + strconv.Itoa(sshLocalPort), "laptop", false},
		{"consume/openssh-agent", "127.0.0.1:" + strconv.Itoa(sshAgentPort), "laptop", false},
		{"consume/plug", "benchsrv:" + clusterPort, "plug -c", false},
		{"serve/raw", d.laptopIP + ":" + strconv.Itoa(laptopPort), "pod", false},
		{"serve/openssh", d.nodeIP + ":" + strconv.Itoa(d.sshForwardPort), "pod", false},
		{"serve/openssh-agent", "benchssh:" + clusterPort, "pod", false},
		{"serve/plug", "benchup:" + clusterPort, "pod", false},
	}
	if d.onlyUDP {
		all = slices.DeleteFunc(all, func(p path) bool { return !strings.HasSuffix(p.name, "/plug") })
		d.throughput(all, map[string]bool{}, procs)
	} else {
		d.throughput(all, d.concurrency(all), procs)
	}
	for _, p := range udp {
		for _, oneway := range []bool{false, true} {
			name, args := p.name, []string{"-rr", "0", "-for", d.udpFor.String()}
			if oneway {
				name, args = name+oneWay, append(args, "-oneway")
			}
			d.logf("path %s: throughput", name)
			out, err := d.runSuite(p, args...)
			if err != nil {
				d.fail(name, err)
				continue
			}
			for metric, values := range out {
				d.row(name, metric, values[0])
			}
		}
	}
	if !d.onlyUDP {
		d.latency(append(all, udp...))
	}
	return nil
}

// oneWay ends the name of a UDP path's rows of its one-way throughput
// (benchtool udp -oneway), beside those of its echoes.
const oneWay = "-oneway"

// The laptop's UDP echo is its bench server's port; the cluster's is
// benchsrv's, whose Service has a UDP port beside the TCP one.
func (d *driver) udpPaths() []path {
	clusterPort := strconv.Itoa(serverPort)
	return []path{
		{"consume/udp-raw", d.serverIP + ":" + clusterPort, "laptop", true},
		{"consume/udp-plug", "benchsrv:" + clusterPort, "plug -c", true},
		{"serve/udp-raw", d.laptopIP + ":" + strconv.Itoa(laptopPort), "pod", true},
		{"serve/udp-plug", "benchudp:" + clusterPort, "pod", true},
	}
}

// startUDP starts the run that serves the name benchudp's UDP port with
// the laptop's UDP echo, a run of its own beside the TCP one, and waits
// until every UDP path is echoed.
func (d *driver) startUDP() ([]*background, error) {
	b, err := d.start("plug-serve-udp", d.laptop(d.plug, "-p", "bench", "-s", fmt.Sprintf("benchudp:%d:%d/udp", serverPort, laptopPort), "--", d.tool, "idle"))
	if err != nil {
		return nil, err
	}
	procs := []*background{b}
	for _, p := range d.udpPaths() {
		if err := eventually(60*time.Second, p.name+" echoes", func() error {
			if b.exited() {
				return fmt.Errorf("%s ended (see %s-%s.log)", b.name, d.profile, b.name)
			}
			_, err := d.runSuite(p, "-rr", "1", "-for", "0")
			return err
		}); err != nil {
			return procs, err
		}
	}
	return procs, nil
}

// startPaths starts what the tunnelled paths need and waits until each
// carries a connection.
func (d *driver) startPaths() ([]*background, error) {
	var procs []*background
	add := func(name string, cmd *exec.Cmd) error {
		b, err := d.start(name, cmd)
		if err != nil {
			return err
		}
		procs = append(procs, b)
		return nil
	}
	ssh := func(port int, user string, forwards ...string) *exec.Cmd {
		args := []string{"ssh", "-N", "-i", d.sshKey, "-p", strconv.Itoa(port),
			"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
			"-o", "ExitOnForwardFailure=yes", "-o", "LogLevel=ERROR", "-o", "ServerAliveInterval=15"}
		return d.laptop(append(append(args, forwards...), user)...)
	}
	lp := strconv.Itoa(laptopPort)
	if err := add("laptop-server", d.laptopTool("serve", ":"+lp)); err != nil {
		return procs, err
	}
	if err := add("ssh-sshd", ssh(d.sshdPort, "root@"+d.nodeIP,
		"-L", fmt.Sprintf("127.0.0.1:%d:%s:%d", sshLocalPort, d.serverClusterIP, serverPort),
		"-R", fmt.Sprintf("%s:%d:127.0.0.1:%s", d.nodeIP, d.sshForwardPort, lp))); err != nil {
		return procs, err
	}
	if err := add("ssh-agent", ssh(d.agentPort, "bench@"+d.nodeIP,
		"-L", fmt.Sprintf("127.0.0.1:%d:benchsrv:%d", sshAgentPort, serverPort),
		"-R", fmt.Sprintf("benchssh:%d:127.0.0.1:%s", serverPort, lp))); err != nil {
		return procs, err
	}
	if err := add("plug-serve", d.laptop(d.plug, "-p", "bench", "-s", fmt.Sprintf("benchup:%d:%s", serverPort, lp), "--", d.tool, "idle")); err != nil {
		return procs, err
	}
	checks := []struct {
		from func(...string) *exec.Cmd
		addr string
	}{
		{d.laptopTool, "127.0.0.1:" + lp},
		{d.laptopTool, fmt.Sprintf("127.0.0.1:%d", sshLocalPort)},
		{d.laptopTool, fmt.Sprintf("127.0.0.1:%d", sshAgentPort)},
		{d.pod, d.laptopIP + ":" + lp},
		{d.pod, fmt.Sprintf("%s:%d", d.nodeIP, d.sshForwardPort)},
		{d.pod, fmt.Sprintf("benchssh:%d", serverPort)},
		{d.pod, fmt.Sprintf("benchup:%d", serverPort)},
	}
	for _, c := range checks {
		if err := eventually(60*time.Second, c.addr+" answers", func() error {
			for _, p := range procs {
				if p.exited() {
					return fmt.Errorf("%s ended (see %s-%s.log)", p.name, d.profile, p.name)
				}
			}
			return d.answers(c.from, c.addr)
		}); err != nil {
			return procs, err
		}
	}
	return procs, nil
}

// concurrency measures how many connections each path holds open at once,
// one path after the other, and returns the paths that failed.
func (d *driver) concurrency(all []path) map[string]bool {
	failed := map[string]bool{}
	for _, p := range all {
		d.logf("path %s: concurrency", p.name)
		out, err := d.runSuite(p, "-bytes", "0", "-rr", "0", "-connects", "0", "-concurrent", strconv.Itoa(d.concurrent))
		if err != nil {
			failed[p.name] = true
			d.fail(p.name, err)
			continue
		}
		for metric, values := range out {
			d.row(p.name, metric, values[0])
		}
	}
	return failed
}

// throughputRounds is how many turns the paths take at throughput, each
// with a third of -bytes each way: a path's figure is the median of its
// turns, so that a moment of the machine's other work does not decide it.
const throughputRounds = 3

// throughput measures one connection's transfer each way on every path
// but those failed, in turns, and writes the median of a path's turns.
// With -parallel, OpenSSH → agent is left out.
//
// On the tunnelled paths it also reads the CPU time both ends of the
// tunnel spend on each transfer (tunnelEnds), from just before its
// connection opens until the far end has its last byte, and writes it
// per GiB carried: the laptop's end, the cluster's end and both.
func (d *driver) throughput(all []path, failed map[string]bool, procs []*background) {
	type pathMetric struct{ path, metric string }
	rates := map[pathMetric][]float64{}
	type spent struct {
		laptop, cluster time.Duration
		bytes           int64
	}
	cpu := map[pathMetric]*spent{}
	each := d.bytes / throughputRounds
	for round := range throughputRounds {
		d.logf("throughput, round %d of %d", round+1, throughputRounds)
		for _, p := range all {
			if failed[p.name] || d.parallel && strings.HasSuffix(p.name, "/openssh-agent") {
				continue
			}
			up, down := "l2p", "p2l"
			if p.where == "pod" {
				up, down = down, up
			}
			var at func(string, *exec.Cmd) error
			var before spent
			if laptopEnd, clusterEnd, ok := d.tunnelEnds(p, procs); ok {
				at = func(phase string, suite *exec.Cmd) error {
					laptop, err := treeCPU(laptopEnd(suite), d.tool)
					if err != nil {
						return fmt.Errorf("the laptop's end: %w", err)
					}
					roots, err := clusterEnd()
					if err != nil {
						return err
					}
					cluster, err := treeCPU(roots, d.tool)
					if err != nil {
						return fmt.Errorf("the cluster's end: %w", err)
					}
					dir, ended := strings.CutSuffix(phase, "-end")
					if !ended {
						before = spent{laptop: laptop, cluster: cluster}
						return nil
					}
					if dir == "up" {
						dir = up
					} else {
						dir = down
					}
					k := pathMetric{p.name, dir}
					if cpu[k] == nil {
						cpu[k] = &spent{}
					}
					cpu[k].laptop += laptop - before.laptop
					cpu[k].cluster += cluster - before.cluster
					cpu[k].bytes += each
					return nil
				}
			}
			out, err := d.runSuiteAt(p, at, "-bytes", strconv.FormatInt(each, 10), "-rr", "0", "-connects", "0")
			if err != nil {
				failed[p.name] = true
				d.fail(p.name+" throughput", err)
				continue
			}
			for metric, name := range map[string]string{"up_mbps": up + "_mbps", "down_mbps": down + "_mbps"} {
				for _, v := range out[metric] {
					if f, err := strconv.ParseFloat(v, 64); err == nil {
						k := pathMetric{p.name, name}
						rates[k] = append(rates[k], f)
					}
				}
			}
		}
	}
	for _, p := range all {
		for _, dir := range []string{"l2p", "p2l"} {
			if r := rates[pathMetric{p.name, dir + "_mbps"}]; !failed[p.name] && len(r) == throughputRounds {
				d.rowf(p.name, dir+"_mbps", median(r))
			}
			if c := cpu[pathMetric{p.name, dir}]; !failed[p.name] && c != nil {
				gib := float64(c.bytes) / (1 << 30)
				d.rowf(p.name, dir+"_cpu_laptop_s_per_gib", c.laptop.Seconds()/gib)
				d.rowf(p.name, dir+"_cpu_cluster_s_per_gib", c.cluster.Seconds()/gib)
				d.rowf(p.name, dir+"_cpu_s_per_gib", (c.laptop+c.cluster).Seconds()/gib)
			}
		}
	}
}

// tunnelEnds names the processes of a tunnelled path's two ends, as roots
// of process trees (treeCPU), or ok false for raw TCP:
//
//	openssh        ssh -L/-R; the bench sshd with its per-connection children
//	openssh-agent  ssh -L/-R through the agent; the agent
//	plug           plug -c, the suite's own command (consume), or the
//	               plug -s run (serve); the agent
//
// The laptop's end is given the suite's command; the cluster's end is
// looked up when read, as the agent is found again if it restarted.
func (d *driver) tunnelEnds(p path, procs []*background) (laptop func(suite *exec.Cmd) []int, cluster func() ([]int, error), ok bool) {
	bg := func(name string) func(*exec.Cmd) []int {
		for _, b := range procs {
			if b.name == name {
				return func(*exec.Cmd) []int { return []int{b.cmd.Process.Pid} }
			}
		}
		return func(*exec.Cmd) []int { return nil }
	}
	agent := func() ([]int, error) {
		if pid := d.agent.pidNow(); pid != 0 {
			return []int{pid}, nil
		}
		return nil, errors.New("the agent's process was not found")
	}
	_, tunnel, _ := strings.Cut(p.name, "/")
	switch {
	case tunnel == "openssh":
		return bg("ssh-sshd"), func() ([]int, error) { return []int{d.sshdPID}, nil }, true
	case tunnel == "openssh-agent":
		return bg("ssh-agent"), agent, true
	case p.name == "consume/plug":
		return func(suite *exec.Cmd) []int { return []int{suite.Process.Pid} }, agent, true
	case p.name == "serve/plug":
		return bg("plug-serve"), agent, true
	}
	return nil, nil, false
}

// latencyRounds is how many turns the paths take at the latency
// measurements, so that what else the machine does weighs on all alike.
const latencyRounds = 10

// latency measures round trips and connection setups of every path in
// turns of a tenth of -rr and -connects each, and writes percentiles over
// all of a path's samples. With -parallel (a profile whose round trips
// are the link's delay, not the machine's work) the paths of a turn are
// measured at the same time.
//
// A UDP path has round trips only (of single datagrams), and the number of
// those that got no echo (rr_lost).
func (d *driver) latency(all []path) {
	rtts := map[string][]time.Duration{}
	setups := map[string][]time.Duration{}
	lost := map[string]float64{}
	failed := map[string]bool{}
	var mu sync.Mutex
	measure := func(p path) {
		args := []string{"-samples", "-rr", strconv.Itoa(max(1, d.rr/latencyRounds))}
		if p.udp {
			args = append(args, "-for", "0")
		} else {
			args = append(args, "-bytes", "0", "-concurrent", "0", "-connects", strconv.Itoa(max(1, d.connects/latencyRounds)))
		}
		out, err := d.runSuite(p, args...)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failed[p.name] = true
			d.fail(p.name+" latency", err)
			return
		}
		rtts[p.name] = append(rtts[p.name], durations(out["rr_us"])...)
		setups[p.name] = append(setups[p.name], durations(out["conn_us"])...)
		for _, v := range out["rr_lost"] {
			n, _ := strconv.ParseFloat(v, 64)
			lost[p.name] += n
		}
	}
	for round := range latencyRounds {
		d.logf("latency, round %d of %d", round+1, latencyRounds)
		var wg sync.WaitGroup
		for _, p := range all {
			if failed[p.name] {
				continue
			}
			if !d.parallel {
				measure(p)
				continue
			}
			wg.Add(1)
			go func() { defer wg.Done(); measure(p) }()
		}
		wg.Wait()
	}
	for _, p := range all {
		if failed[p.name] {
			continue
		}
		d.rowf(p.name, "rr_p50_us", micros(percentile(rtts[p.name], 50)))
		d.rowf(p.name, "rr_p99_us", micros(percentile(rtts[p.name], 99)))
		d.rowf(p.name, "rr_n", float64(len(rtts[p.name])))
		if p.udp {
			d.rowf(p.name, "rr_lost", lost[p.name])
			continue
		}
		d.rowf(p.name, "conn_p50_us", micros(percentile(setups[p.name], 50)))
		d.rowf(p.name, "conn_p99_us", micros(percentile(setups[p.name], 99)))
		d.rowf(p.name, "conn_n", float64(len(setups[p.name])))
	}
}

// durations parses microseconds.
func durations(values []string) []time.Duration {
	var out []time.Duration
	for _, v := range values {
		if us, err := strconv.ParseFloat(v, 64); err == nil {
			out = append(out, time.Duration(us*float64(time.Microsecond)))
		}
	}
	return out
}

// runSuite runs the suite on one path with args and returns its results,
// each metric with its values in order.
func (d *driver) runSuite(p path, args ...string) (map[string][]string, error) {
	return d.runSuiteAt(p, nil, args...)
}

// runSuiteAt is runSuite that, if at is not nil, runs the suite with -sync
// and calls at with each phase it stops at (up, up-end, down, down-end)
// and the suite's command (its process: plug -c's for that path) before
// the suite goes on.
func (d *driver) runSuiteAt(p path, at func(phase string, suite *exec.Cmd) error, args ...string) (map[string][]string, error) {
	tool := "suite"
	if p.udp {
		tool = "udp"
	}
	args = append([]string{tool, "-addr", p.addr}, args...)
	if at != nil {
		args = append(args, "-sync")
	}
	var cmd *exec.Cmd
	switch p.where {
	case "laptop":
		cmd = d.laptopTool(args...)
	case "plug -c":
		cmd = d.laptop(append([]string{d.plug, "-p", "bench", "-c", "--", d.tool}, args...)...)
	default:
		cmd = d.podWith(at != nil, args...)
	}
	// What the tool (and plug -c) says on stderr is kept, even when it
	// succeeds: a connection that failed among many is counted, and its
	// error is only there.
	log, err := os.OpenFile(filepath.Join(d.work, d.profile+"-"+strings.ReplaceAll(p.name, "/", "-")+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	var stderr strings.Builder
	cmd.Stderr = io.MultiWriter(log, &stderr)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stdin io.WriteCloser
	if at != nil {
		if stdin, err = cmd.StdinPipe(); err != nil {
			return nil, err
		}
		defer stdin.Close()
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	results := map[string][]string{}
	var atErr error
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		metric, value, ok := strings.Cut(sc.Text(), ",")
		if !ok {
			continue
		}
		if metric != "sync" {
			results[metric] = append(results[metric], value)
			continue
		}
		if atErr == nil && at != nil {
			atErr = at(value, cmd)
		}
		if atErr != nil { // the suite is ended: what it measures now would not be counted
			cmd.Process.Kill()
			break
		}
		if _, err := io.WriteString(stdin, "\n"); err != nil {
			atErr = err
		}
	}
	io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); atErr == nil && err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 600 {
			msg = "…" + msg[len(msg)-600:]
		}
		return nil, fmt.Errorf("%s: %v: %s", strings.Join(cmd.Args, " "), err, msg)
	}
	return results, atErr
}
