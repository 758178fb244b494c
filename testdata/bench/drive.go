package main

import (
	"bufio"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// drive measures one profile on the set-up run.sh made (the laptop
// namespace and its link, the bench sshd, the agent and the bench
// workloads in a Kubernetes namespace, a plug profile "bench") and writes
// CSV rows "profile,path,metric,value" on stdout. Progress goes to stderr.
// A measurement that fails is reported and skipped; the others go on.
func drive(args []string) error {
	d := &driver{}
	fs := flag.NewFlagSet("drive", flag.ExitOnError)
	fs.StringVar(&d.profile, "profile", "", "the profile's name, for the rows")
	fs.StringVar(&d.work, "work", "", "a directory for logs")
	fs.StringVar(&d.netns, "netns", "plugbench", "the laptop's network namespace")
	fs.StringVar(&d.home, "home", "", "the laptop's HOME, with the plug profile bench")
	fs.StringVar(&d.plug, "plug", "", "the plug binary")
	fs.StringVar(&d.tool, "tool", "", "this binary, as the laptop runs it")
	fs.StringVar(&d.kubectl, "kubectl", "kubectl", "kubectl")
	fs.StringVar(&d.ns, "ns", "plug-bench", "the Kubernetes namespace of the agent and the bench workloads")
	fs.StringVar(&d.serverIP, "server-ip", "", "the bench server pod's address")
	fs.StringVar(&d.serverClusterIP, "server-cluster-ip", "", "the benchsrv Service's ClusterIP")
	fs.StringVar(&d.laptopIP, "laptop-ip", "", "the laptop's address")
	fs.StringVar(&d.nodeIP, "node-ip", "", "the node's address: the agent's NodePort, the bench sshd")
	fs.IntVar(&d.agentPort, "agent-port", 32222, "the agent's NodePort")
	fs.IntVar(&d.sshdPort, "sshd-port", 2022, "the bench sshd's port")
	fs.IntVar(&d.sshForwardPort, "ssh-forward-port", 19001, "the port ssh -R opens on the node's address through the bench sshd")
	fs.IntVar(&d.sshdPID, "sshd-pid", 0, "the bench sshd's process (its per-connection children are found from it)")
	fs.StringVar(&d.sshKey, "ssh-key", "", "the OpenSSH client's key (the sshd accepts it; the agent admits anyone)")
	fs.Int64Var(&d.bytes, "bytes", 1<<30, "bytes of each throughput transfer")
	fs.IntVar(&d.rr, "rr", 10000, "round trips of the latency measurement")
	fs.IntVar(&d.connects, "connects", 1000, "new connections of the setup measurement")
	fs.IntVar(&d.concurrent, "concurrent", 1000, "connections held at once")
	fs.IntVar(&d.starts, "starts", 10, "runs of each session-start measurement")
	fs.IntVar(&d.runs, "runs", 50, "concurrent runs on one agent")
	fs.DurationVar(&d.udpFor, "udp-for", 10*time.Second, "time of each UDP throughput measurement")
	fs.BoolVar(&d.parallel, "parallel", false, "measure the latency of the paths at the same time, and skip the throughput of OpenSSH → agent (for a profile with a long round trip)")
	fs.BoolVar(&d.onlyPaths, "only-paths", false, "measure the paths only, not session start and runs")
	fs.BoolVar(&d.onlyStart, "only-start", false, "measure session start only")
	fs.BoolVar(&d.onlyUDP, "only-udp", false, "measure UDP throughput only, beside plug's TCP throughput")
	fs.Parse(args)
	for name, v := range map[string]string{"profile": d.profile, "work": d.work, "home": d.home, "plug": d.plug, "tool": d.tool,
		"server-ip": d.serverIP, "server-cluster-ip": d.serverClusterIP, "laptop-ip": d.laptopIP, "node-ip": d.nodeIP, "ssh-key": d.sshKey} {
		if v == "" {
			return fmt.Errorf("give -%s", name)
		}
	}
	if d.sshdPID == 0 {
		return errors.New("give -sshd-pid")
	}
	d.out = csv.NewWriter(os.Stdout)
	defer d.out.Flush()
	return d.run()
}

// The ports of the laptop side and the names the cluster side calls.
const (
	laptopPort   = 9001  // the laptop's bench server
	sshLocalPort = 19000 // ssh -L through the bench sshd, to benchsrv's ClusterIP
	sshAgentPort = 19100 // ssh -L through the plug agent, to benchsrv
	serverPort   = 9000  // benchsrv, and the names the laptop serves
	markPort     = 18080 // the session-start marker
	loadBasePort = 20000 // the 50 runs' local servers
)

type driver struct {
	profile, work, netns, home, plug, tool, kubectl, ns string
	serverIP, serverClusterIP, laptopIP, nodeIP         string
	agentPort, sshdPort, sshForwardPort, sshdPID        int
	sshKey                                              string
	bytes                                               int64
	rr, connects, concurrent, starts, runs              int
	udpFor                                              time.Duration
	parallel, onlyPaths, onlyStart, onlyUDP             bool

	out      *csv.Writer
	failures int
	agent    *rssSampler
}

func (d *driver) run() error {
	d.agent = newRSSSampler(d)
	defer d.agent.stop()
	steps := []struct {
		name string
		run  func() error
	}{
		{"concurrent runs and agent memory", d.scale},
		{"session start", d.sessionStart},
		{"paths", d.paths},
	}
	if d.onlyPaths || d.onlyUDP {
		steps = steps[2:]
	}
	if d.onlyStart {
		steps = steps[1:2]
	}
	for _, s := range steps {
		d.logf("%s", s.name)
		if err := s.run(); err != nil {
			d.fail(s.name, err)
		}
	}
	if d.failures > 0 {
		return fmt.Errorf("%d measurement(s) of profile %s failed (see above)", d.failures, d.profile)
	}
	return nil
}

func (d *driver) logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench: %s: %s\n", d.profile, fmt.Sprintf(format, a...))
}

func (d *driver) fail(what string, err error) {
	d.failures++
	d.logf("FAILED %s: %v", what, err)
	d.row(what, "error", err.Error())
}

func (d *driver) row(path, metric, value string) {
	d.out.Write([]string{d.profile, path, metric, value})
	d.out.Flush()
}

func (d *driver) rowf(path, metric string, v float64) {
	d.row(path, metric, strconv.FormatFloat(v, 'f', 3, 64))
}

// laptop is a command in the laptop's namespace, with its HOME.
func (d *driver) laptop(args ...string) *exec.Cmd {
	full := append([]string{"netns", "exec", d.netns, "env", "HOME=" + d.home}, args...)
	return exec.Command("ip", full...)
}

// pod is a command of this binary in the benchcli pod.
func (d *driver) pod(args ...string) *exec.Cmd {
	return d.podWith(false, args...)
}

// podWith is pod, with its standard input passed to the pod's command if
// stdin is true.
func (d *driver) podWith(stdin bool, args ...string) *exec.Cmd {
	full := []string{"-n", d.ns, "exec"}
	if stdin {
		full = append(full, "-i")
	}
	full = append(append(full, "benchcli", "--", "/benchtool"), args...)
	return exec.Command(d.kubectl, full...)
}

// kubectlCmd is kubectl in the bench namespace.
func (d *driver) kubectlCmd(args ...string) *exec.Cmd {
	return exec.Command(d.kubectl, append([]string{"-n", d.ns}, args...)...)
}

// output runs cmd and returns its standard output, or an error carrying
// the end of its standard error.
func output(cmd *exec.Cmd) (string, error) {
	var stderr strings.Builder
	if cmd.Stderr != nil {
		cmd.Stderr = io.MultiWriter(cmd.Stderr, &stderr)
	} else {
		cmd.Stderr = &stderr
	}
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 600 {
			msg = "…" + msg[len(msg)-600:]
		}
		return string(out), fmt.Errorf("%s: %v: %s", strings.Join(cmd.Args, " "), err, msg)
	}
	return string(out), nil
}

// background is a process that runs while a step measures.
type background struct {
	name string
	cmd  *exec.Cmd
	done chan error
}

// start starts cmd in the background, its output in a log file of the
// work directory.
func (d *driver) start(name string, cmd *exec.Cmd) (*background, error) {
	log, err := os.Create(filepath.Join(d.work, d.profile+"-"+name+".log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	b := &background{name: name, cmd: cmd, done: make(chan error, 1)}
	go func() { b.done <- cmd.Wait(); log.Close() }()
	return b, nil
}

// stop interrupts the process, as Ctrl-C would, and waits for it; it is
// killed if it has not ended within limit.
func (b *background) stop(limit time.Duration) error {
	b.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-b.done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return nil // ended by the signal, or with its own code
		}
		return err
	case <-time.After(limit):
		b.cmd.Process.Kill()
		<-b.done
		return fmt.Errorf("%s did not end within %v of SIGINT", b.name, limit)
	}
}

func (b *background) exited() bool {
	select {
	case err := <-b.done:
		b.done <- err
		return true
	default:
		return false
	}
}

// eventually calls probe until it succeeds or limit has passed.
func eventually(limit time.Duration, what string, probe func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := probe()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %v: %w", what, limit, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// answers checks that a bench server answers at addr, from where cmd runs.
func (d *driver) answers(from func(...string) *exec.Cmd, addr string) error {
	_, err := output(from("suite", "-addr", addr, "-bytes", "0", "-rr", "0", "-connects", "1", "-timeout", "5s"))
	return err
}

func (d *driver) laptopTool(args ...string) *exec.Cmd {
	return d.laptop(append([]string{d.tool}, args...)...)
}

// readLines sends each line of r to lines until r ends.
func readLines(r io.Reader, lines chan<- string) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		lines <- sc.Text()
	}
	close(lines)
}

// waitLine waits for a line starting with prefix and returns the rest.
func waitLine(lines <-chan string, prefix string, limit time.Duration) (string, error) {
	timeout := time.After(limit)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return "", fmt.Errorf("ended before saying %q", prefix)
			}
			if rest, found := strings.CutPrefix(l, prefix); found {
				return strings.TrimSpace(rest), nil
			}
		case <-timeout:
			return "", fmt.Errorf("did not say %q within %v", prefix, limit)
		}
	}
}

// stopAll stops processes in parallel.
func stopAll(procs []*background, limit time.Duration) error {
	var wg sync.WaitGroup
	errs := make([]error, len(procs))
	for i, p := range procs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = p.stop(limit) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}
