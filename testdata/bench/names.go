package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// names measures how plug's cost follows the cluster's size (scale.sh is
// its user): with 1, 100, 1,000 (and 10,000) Services in the agent's
// namespace, how long `plug -c -- true` takes and the agent's memory;
// then, at one of those sizes (-runs-at), -runs runs at once (start
// p50/p99, the agent's memory and CPU), and one Service created while they
// are connected: how long until each run resolves it, and what the agent
// sent.
// It writes CSV rows (section,count,metric,value) to stdout.
func names(args []string) error {
	fs := flag.NewFlagSet("names", flag.ExitOnError)
	var d namesDriver
	counts := fs.String("counts", "1,100,1000", "the namespace sizes, ascending")
	fs.StringVar(&d.plug, "plug", "", "plug binary")
	fs.StringVar(&d.tool, "tool", "", "this binary (the runs' command)")
	fs.StringVar(&d.home, "home", "", "HOME with the plug profile")
	fs.StringVar(&d.profile, "profile", "scale", "the plug profile")
	fs.StringVar(&d.kubectl, "kubectl", "kubectl", "kubectl")
	fs.StringVar(&d.ns, "ns", "", "the agent's namespace, where the Services are made")
	fs.StringVar(&d.work, "work", "", "directory for the runs' logs")
	fs.IntVar(&d.starts, "starts", 10, "starts of plug -c -- true per size")
	fs.IntVar(&d.runs, "runs", 200, "concurrent runs")
	runsAt := fs.Int("runs-at", 0, "the namespace size (one of -counts) at which the runs are measured; 0: the largest")
	fs.Parse(args)
	for _, f := range strings.Split(*counts, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return fmt.Errorf("-counts: %q is not a count", f)
		}
		d.counts = append(d.counts, n)
	}
	d.out = csv.NewWriter(os.Stdout)
	defer d.out.Flush()
	d.agent = newRSSSampler(&driver{kubectl: d.kubectl, ns: d.ns})
	defer d.agent.stop()
	fresh, err := d.agent.settle()
	if err != nil {
		return err
	}
	d.row("agent", 0, "rss_fresh_mb", mb(fresh))
	if *runsAt == 0 {
		*runsAt = d.counts[len(d.counts)-1]
	}
	if !slices.Contains(d.counts, *runsAt) {
		return fmt.Errorf("-runs-at %d is not one of -counts", *runsAt)
	}
	for _, n := range d.counts {
		if err := d.size(n); err != nil {
			return err
		}
		if n == *runsAt && d.runs > 0 {
			if err := d.concurrent(n); err != nil {
				return err
			}
		}
	}
	return nil
}

type namesDriver struct {
	plug, tool, home, profile, kubectl, ns, work string
	resolv                                       string // the runs' resolv.conf (startSeen)
	counts                                       []int
	starts, runs                                 int
	made                                         int // Services svc-00000… made so far
	out                                          *csv.Writer
	agent                                        *rssSampler
}

func (d *namesDriver) row(section string, count int, metric string, v float64) {
	d.out.Write([]string{section, strconv.Itoa(count), metric, strconv.FormatFloat(v, 'f', -1, 64)})
	d.out.Flush()
}

func (d *namesDriver) logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench: names: "+format+"\n", a...)
}

func (d *namesDriver) kubectlCmd(args ...string) *exec.Cmd {
	return exec.Command(d.kubectl, append([]string{"-n", d.ns}, args...)...)
}

// plugCmd is plug with the profile's HOME.
func (d *namesDriver) plugCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(d.plug, append([]string{"-p", d.profile}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+d.home)
	return cmd
}

// serviceName is the i-th Service the bench makes.
func serviceName(i int) string { return fmt.Sprintf("svc-%05d", i) }

// makeServices makes Services up to n in all: headless (no ClusterIP, so
// the shared node's kube-proxy programs nothing), no selector, two TCP
// ports, as many a namespace holds; the agent offers them like any other.
func (d *namesDriver) makeServices(n int) error {
	for d.made < n {
		var b strings.Builder
		b.WriteString("apiVersion: v1\nkind: List\nitems:\n")
		end := min(n, d.made+1000)
		for i := d.made; i < end; i++ {
			fmt.Fprintf(&b, "- apiVersion: v1\n  kind: Service\n  metadata: {name: %s, labels: {bench: scale}}\n  spec: {clusterIP: None, ports: [{name: http, port: 80}, {name: alt, port: 8080}]}\n", serviceName(i))
		}
		cmd := d.kubectlCmd("create", "-f", "-")
		cmd.Stdin = strings.NewReader(b.String())
		if _, err := output(cmd); err != nil {
			return err
		}
		d.made = end
	}
	return nil
}

// size makes the namespace hold n Services, waits until a run resolves
// the last, and measures the agent's memory and -starts starts of a
// command that looks no name up (true) and of one that looks the last
// Service up (getent hosts).
func (d *namesDriver) size(n int) error {
	if err := d.makeServices(n); err != nil {
		return err
	}
	last := serviceName(n - 1)
	if err := eventually(120*time.Second, "a run resolving "+last, func() error {
		_, err := output(d.plugCmd("-c", "--", "getent", "hosts", last))
		return err
	}); err != nil {
		return err
	}
	idle, err := d.agent.idle()
	if err != nil {
		return err
	}
	took, err := d.timeStarts("true")
	if err != nil {
		return err
	}
	looked, err := d.timeStarts("getent", "hosts", last)
	if err != nil {
		return err
	}
	d.logf("%d Services: agent %.1f MB; plug -c -- true %v; plug -c -- getent hosts %s %v", n, mb(idle), took, last, looked)
	d.row("size", n, "rss_mb", mb(idle))
	d.row("size", n, "start_p50_ms", ms(percentile(took, 50)))
	d.row("size", n, "start_max_ms", ms(slices.Max(took)))
	d.row("size", n, "starts", float64(len(took)))
	d.row("size", n, "lookup_p50_ms", ms(percentile(looked, 50)))
	d.row("size", n, "lookup_max_ms", ms(slices.Max(looked)))
	return nil
}

// timeStarts runs plug -c -- CMD -starts times, one after the other, and
// returns how long each took from start to exit.
func (d *namesDriver) timeStarts(cmd ...string) ([]time.Duration, error) {
	var took []time.Duration
	for range d.starts {
		start := time.Now()
		if _, err := output(d.plugCmd(append([]string{"-c", "--"}, cmd...)...)); err != nil {
			return nil, err
		}
		took = append(took, time.Since(start))
	}
	return took, nil
}

// concurrent starts d.runs runs at once, each waiting for a Service that
// does not exist yet (benchtool seen), then creates it and measures how
// long each run took to resolve it and what the agent sent meanwhile; at
// the end, the agent's memory idle once the runs are gone.
func (d *namesDriver) concurrent(n int) error {
	pid := d.agent.pidNow()
	if pid == 0 {
		return fmt.Errorf("the agent's process was not found")
	}
	fresh := fmt.Sprintf("fresh-%d", time.Now().Unix())
	d.resolv = filepath.Join(d.work, "resolv.conf")
	if err := os.WriteFile(d.resolv, []byte("# the bench's runs: every name but the cluster's is unknown\nnameserver 127.0.0.1\n"), 0o644); err != nil {
		return err
	}
	stopDNS, err := serveNXDomain("127.0.0.1:53")
	if err != nil {
		return fmt.Errorf("the runs' nameserver: %w", err)
	}
	defer stopDNS()
	d.agent.reset()
	cpu0 := cpuTime(pid)
	runs := make([]*seenRun, d.runs)
	started := time.Now()
	var wg sync.WaitGroup
	starting := make(chan struct{}, startingAtOnce)
	for i := range runs {
		wg.Go(func() {
			starting <- struct{}{}
			runs[i] = d.startSeen(i, fresh, serviceName(n-1))
			<-starting
		})
	}
	wg.Wait()
	defer func() {
		for _, r := range runs {
			r.stop()
		}
	}()
	var starts []time.Duration
	var up []*seenRun
	for i, r := range runs {
		if r.err != nil {
			d.logf("run %d: %v", i+1, r.err)
			continue
		}
		starts = append(starts, r.up.Sub(r.began))
		up = append(up, r)
	}
	if len(up) == 0 {
		return fmt.Errorf("none of the %d runs started", d.runs)
	}
	allUp := time.Since(started)
	var readies []time.Duration
	readyBy := time.After(120 * time.Second)
	for _, r := range up {
		select {
		case <-r.readyCh:
			readies = append(readies, r.ready.Sub(r.began))
		case <-readyBy:
			return fmt.Errorf("%d of %d runs did not resolve %s within 120 s", len(up)-len(readies), len(up), serviceName(n-1))
		}
	}
	cpu := cpuTime(pid) - cpu0
	peak := d.agent.peak()
	d.logf("%d runs with %d Services: all up after %s, all resolved a Service after %s, agent %.1f MB, %.2f s CPU", d.runs, n, allUp, time.Since(started), mb(peak), cpu.Seconds())
	d.row("runs", n, "runs", float64(d.runs))
	d.row("runs", n, "failed", float64(d.runs-len(up)))
	d.row("runs", n, "start_p50_ms", ms(percentile(starts, 50)))
	d.row("runs", n, "start_p99_ms", ms(percentile(starts, 99)))
	d.row("runs", n, "ready_p50_ms", ms(percentile(readies, 50)))
	d.row("runs", n, "ready_p99_ms", ms(percentile(readies, 99)))
	d.row("runs", n, "rss_mb", mb(peak))
	d.row("runs", n, "cpu_ms_per_run", ms(cpu)/float64(len(up)))

	// What the agent sends its idle runs over quiet seconds (their
	// keepalives' answers), then over the change.
	quiet := 3 * time.Second
	tx0 := sshSent(pid)
	time.Sleep(quiet)
	idleTx := sshSent(pid) - tx0
	tx0 = sshSent(pid)
	cmd := d.kubectlCmd("create", "service", "clusterip", fresh, "--clusterip=None", "--tcp=80")
	if _, err := output(cmd); err != nil {
		return err
	}
	created := time.Now() // kubectl returned: the API server has the Service
	var seen []time.Duration
	deadline := time.After(60 * time.Second)
	for _, r := range up {
		select {
		case <-r.seenCh:
			seen = append(seen, r.seen.Sub(created))
		case <-deadline:
			return fmt.Errorf("%d of %d runs did not resolve %s within 60 s", len(up)-len(seen), len(up), fresh)
		}
	}
	window := time.Since(created)
	sent := sshSent(pid) - tx0 - int64(float64(idleTx)*window.Seconds()/quiet.Seconds())
	d.logf("%s resolved by every run: p50 %s, max %s; the agent sent %d bytes beyond idle", fresh, percentile(seen, 50), slices.Max(seen), sent)
	d.row("change", n, "resolved_p50_ms", ms(percentile(seen, 50)))
	d.row("change", n, "resolved_max_ms", ms(slices.Max(seen)))
	d.row("change", n, "bytes_per_run", float64(sent)/float64(len(up)))
	d.kubectlCmd("delete", "service", fresh).Run()

	for _, r := range runs {
		r.stop()
	}
	// The agent gives freed memory back every 10 s (tunnel/scavenge.go):
	// its memory is read after two and a half of those.
	for range 5 {
		time.Sleep(5 * time.Second)
		d.logf("agent after the runs: %.1f MB", mb(d.agent.current()))
	}
	after, err := d.agent.settle()
	if err != nil {
		return err
	}
	d.logf("agent idle after the runs: %.1f MB", mb(after))
	d.row("agent", n, "rss_after_mb", mb(after))
	return nil
}

// startingAtOnce is how many runs start at the same time: the agent lets
// 32 connections of one source network into their SSH handshake at once,
// and holds 64 more for 5 s (deploy/README.md, "The caps"), and each run
// sets up its names on this machine's 2 cores; the bench's runs all come
// from one address and one machine, where 200 developers would come from
// many.
const startingAtOnce = 16

// seenRun is one `plug -c -- benchtool seen NAME KNOWN`.
type seenRun struct {
	cmd     *exec.Cmd
	began   time.Time
	up      time.Time // the command started
	ready   time.Time // the command resolved KNOWN
	readyCh chan struct{}
	seen    time.Time // the command resolved the name
	seenCh  chan struct{}
	err     error
	once    sync.Once
}

// startSeen starts run i, which resolves known, then waits for name. The
// run is started in a mount namespace of its own whose /etc/resolv.conf
// names only 127.0.0.1, where serveNXDomain answers: the lookups of name
// before it exists, 20 a second from each run, end on this machine, not at
// the machine's nameservers.
func (d *namesDriver) startSeen(i int, name, known string) *seenRun {
	r := &seenRun{readyCh: make(chan struct{}), seenCh: make(chan struct{})}
	plug := d.plugCmd("-c", "--", d.tool, "seen", name, known)
	r.cmd = exec.Command("unshare", append([]string{"-m", "--", "sh", "-c", `mount --bind "$0" /etc/resolv.conf && exec "$@"`, d.resolv}, plug.Args...)...)
	r.cmd.Env = plug.Env
	log, err := os.Create(filepath.Join(d.work, fmt.Sprintf("names-run-%03d.log", i+1)))
	if err != nil {
		r.err = err
		return r
	}
	r.cmd.Stderr = log
	stdout, _ := r.cmd.StdoutPipe()
	r.began = time.Now()
	if r.err = r.cmd.Start(); r.err != nil {
		return r
	}
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "up" {
		r.err = fmt.Errorf("the run's command did not start (see %s)", log.Name())
		return r
	}
	r.up = time.Now()
	go func() {
		if lines.Scan() && lines.Text() == "ready" {
			r.ready = time.Now()
			close(r.readyCh)
		}
		if lines.Scan() && lines.Text() == "seen" {
			r.seen = time.Now()
			close(r.seenCh)
		}
		for lines.Scan() {
		}
		log.Close()
	}()
	return r
}

func (r *seenRun) stop() {
	r.once.Do(func() {
		if r.cmd != nil && r.cmd.Process != nil {
			r.cmd.Process.Signal(syscall.SIGINT)
			done := make(chan struct{})
			go func() { r.cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				r.cmd.Process.Kill()
			}
		}
	})
}

// seen (a run's command) says "up", waits until KNOWN resolves, says
// "ready", waits until NAME resolves, says "seen", and sleeps until
// signalled.
func seen(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("usage: benchtool seen NAME KNOWN")
	}
	fmt.Println("up")
	if err := awaitName(args[1]); err != nil {
		return err
	}
	fmt.Println("ready")
	if err := awaitName(args[0]); err != nil {
		return err
	}
	fmt.Println("seen")
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop // a bare select{} is a deadlock the runtime ends the program for
	return nil
}

// awaitName returns once name resolves. Every 50 ms it asks the resolver
// for name's IPv4 address (where the run answers the command's DNS, a name
// resolves once looked up), and looks at /etc/hosts' size and time,
// reading the file when they change (where the run writes every name
// there at start and rewrites the file in place, which Go's resolver may
// not read again for seconds); inotify would need an instance per run,
// more than a user may have (fs.inotify.max_user_instances).
func awaitName(name string) error {
	var last os.FileInfo
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		addrs, _ := net.DefaultResolver.LookupIP(ctx, "ip4", name)
		cancel()
		if len(addrs) > 0 {
			return nil
		}
		fi, err := os.Stat("/etc/hosts")
		if err != nil {
			return err
		}
		if last == nil || fi.Size() != last.Size() || !fi.ModTime().Equal(last.ModTime()) {
			last = fi
			hosts, err := os.ReadFile("/etc/hosts")
			if err != nil {
				return err
			}
			if slices.ContainsFunc(bytes.Fields(hosts), func(f []byte) bool { return string(f) == name }) {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cpuTime is the user and system time of process pid so far.
func cpuTime(pid int) time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

// agentSSHPort is the port the agent's container listens on for SSH
// (deploy/plug-k8s.yaml).
const agentSSHPort = 2222

// sshSent is what the agent, process pid, has sent so far on its runs'
// SSH connections that are open: the sum of their TCP sockets' bytes_sent
// (ss, in the agent's network namespace), without its traffic to the API
// server, whose bursts (the runs' records renewed) would hide a change's.
func sshSent(pid int) int64 {
	out, err := exec.Command("nsenter", "-t", strconv.Itoa(pid), "-n", "ss", "-tinH", "state", "established", fmt.Sprintf("( sport = :%d )", agentSSHPort)).Output()
	if err != nil {
		return 0
	}
	var total int64
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "bytes_sent:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			total += n
		}
	}
	return total
}
