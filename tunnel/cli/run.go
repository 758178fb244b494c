package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	"plug/tunnel"
	"plug/tunnel/cli/lifeline"
)

// execute carries out a checked plan: it connects to every profile's
// agent, serves the names, runs CMD, and gives the names back when CMD
// exits. It returns CMD's exit code as an *exitCode.
//
// With --env-from, the workload's environment is read first (env.go): a
// workload that does not exist stops the run before any agent is asked
// for anything else, and without CMD the run ends once the files are
// written.
func (c *cli) execute(p *plan) error {
	var environ []string // CMD's environment; nil is plug's own
	if p.env != nil {
		env, err := c.fetchEnv(p)
		if err != nil {
			return err
		}
		if len(p.cmd) == 0 {
			return nil
		}
		environ = env.cmd
	} else if len(p.set) > 0 {
		environ = overlay(os.Environ(), p.set)
	}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwardedSignals...)
	defer signal.Stop(sigs)

	if !p.tunnels() {
		code, _ := c.supervise(p, p.cmd, nil, sigs, nil, environ, func() {})
		return code
	}
	runs, err := c.open(p, sigs)
	if err != nil {
		return err
	}
	names := c.consume(runs, p.docker) // the cluster's names for CMD: consume.go
	defer names.close()
	argv, resolve, stop := p.cmd, names, func() {}
	if p.docker {
		d, err := newDockerRun(p.id, p.cmd)
		if err != nil {
			c.goodbye(runs, sigs)
			return &exitCode{ExitNoCmd, err}
		}
		defer d.remove()
		stdin, _ := c.stdin.(*os.File)
		// The container resolves the names by its --add-host lines; the
		// docker CLI itself needs none.
		argv, resolve, stop = d.argv(names.hosts(), stdin), nil, d.stop
	}
	code, forced := c.supervise(p, argv, runs, sigs, resolve, environ, stop)
	names.halt() // a catalog still coming is no longer planned
	if !forced {
		c.goodbye(runs, sigs)
	} else {
		c.closeVolumes(runs)
	}
	return code
}

// goodbye closes every session, so the agents give the names back at once.
// A Ctrl-C meanwhile stops waiting for them.
func (c *cli) goodbye(runs []*session, sigs <-chan os.Signal) {
	c.closeVolumes(runs)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		var wg sync.WaitGroup
		for _, s := range runs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.tunnel.Close()
			}()
		}
		wg.Wait()
	}()
	for {
		select {
		case <-closed:
			return
		case sig := <-sigs:
			if isInterrupt(sig) {
				fmt.Fprintln(c.stderr, "plug: not waiting for the agents to give the names back; they will after their grace period")
				return
			}
		}
	}
}

// session is a target's connected tunnel.
type session struct {
	*target
	tunnel  *tunnel.Session
	volumes []*openVolume // unmounted, and their ports closed, before goodbye
}

// prefix labels a line about t when the run has several profiles.
func (p *plan) prefix(t *target) string {
	if len(p.targets) == 1 {
		return ""
	}
	return t.profile.Name + ": "
}

// open connects to every target's agent and serves its names. A signal
// during it cancels everything opened so far. Errors exit with ExitConnect.
func (c *cli) open(p *plan, sigs <-chan os.Signal) ([]*session, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var interrupted os.Signal
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		select {
		case s := <-sigs:
			interrupted = s
			cancel()
		case <-ctx.Done():
		}
	}()
	runs, err := c.connectAndServe(ctx, p)
	cancel()
	<-watching
	if interrupted != nil {
		c.goodbye(runs, sigs)
		return nil, &exitCode{code: 128 + signalNumber(interrupted)}
	}
	if err != nil {
		c.goodbye(runs, sigs)
		return nil, &exitCode{ExitConnect, err}
	}
	return runs, nil
}

func (c *cli) connectAndServe(ctx context.Context, p *plan) ([]*session, error) {
	c.tuneRuntime()
	id, err := runID()
	if err != nil {
		return nil, err
	}
	var runs []*session
	for _, t := range p.targets {
		prefix := p.prefix(t)
		p.id = id
		container := ""
		if p.docker {
			container = tunnel.ContainerDockerrun
		}
		// The names are asked for with the hello: an agent that takes them
		// so answers them without a round trip each.
		var asks []tunnel.Ask
		for _, s := range t.serves {
			a := tunnel.Ask{Name: s.Name, Port: s.ClusterPort, UDP: s.UDP, Local: s.local()}
			if !s.UDP {
				a.Filter = p.filter
			}
			asks = append(asks, a)
		}
		sess, err := tunnel.Connect(ctx, tunnel.ClientConfig{
			Addr:    t.profile.Addr(),
			User:    t.user,
			Signer:  t.signer,
			HostKey: t.hostKey,
			Run:     tunnel.RunInfo{ID: id, Version: tunnel.Version, Serves: len(t.serves) > 0, Comment: t.comment, Container: container},
			Events:  func(e tunnel.Event) { c.event(prefix, e) },
			Profile: t.profile.Name,
			Asks:    asks,
			// The names come when the run needs them (consume.go).
			NamesWhenAsked: true,
		})
		if err != nil {
			return runs, fmt.Errorf("%s%v", prefix, err)
		}
		runs = append(runs, &session{target: t, tunnel: sess})
		for _, s := range t.serves {
			local := s.local()
			var served tunnel.Served
			var err error
			if s.UDP {
				served, err = sess.ServeUDP(ctx, s.Name, s.ClusterPort, local)
			} else {
				served, err = sess.ServeFiltered(ctx, s.Name, s.ClusterPort, local, p.filter)
			}
			if err != nil {
				return runs, fmt.Errorf("%s%v", prefix, err) // a *tunnel.ServeError names s
			}
			line := fmt.Sprintf("plug: %s%s:%d%s → localhost:%d%s", prefix, s.Name, s.ClusterPort, s.suffix(), s.LocalPort, s.suffix())
			if served.Detail != "" {
				line += " (" + served.Detail + ")"
			}
			fmt.Fprintln(c.stderr, line)
		}
		s := runs[len(runs)-1]
		s.volumes, err = c.openVolumes(ctx, p, s)
		if err != nil {
			return runs, err
		}
	}
	return runs, nil
}

// event shows an agent's event on stderr. The end of a session is told
// once, by supervise, with its reason.
func (c *cli) event(prefix string, e tunnel.Event) {
	if e.Kind == tunnel.EventEnded {
		return
	}
	if e.Kind == tunnel.EventWarning {
		fmt.Fprintf(c.stderr, "plug: warning: %s%s\n", prefix, e.Text)
	} else {
		fmt.Fprintf(c.stderr, "plug: %s%s\n", prefix, e.Text)
	}
}

// supervise runs argv (CMD, or the docker run of a --dockerrun) with
// environ (nil: plug's own) until it exits, forwarding signals to it and
// stopping it when a session ends for good; stop is called too, in a
// goroutine of its own, each time (a container is stopped by docker stop).
// forced is a second interrupt: CMD was killed and plug exits at once,
// without goodbye. A run without sessions has no names (nil).
func (c *cli) supervise(p *plan, argv []string, runs []*session, sigs <-chan os.Signal, names *consumer, environ []string, stop func()) (code *exitCode, forced bool) {
	cmd, tether, err := c.start(argv, names, environ)
	if err != nil {
		return err, false
	}
	defer tether.Cut() // what CMD left running ends with it
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	type loss struct {
		s   *session
		err error
	}
	lost := make(chan loss, len(runs))
	for _, s := range runs {
		go func() {
			<-s.tunnel.Done()
			lost <- loss{s, s.tunnel.Err()}
		}()
	}

	var ended bool
	interrupts := 0
	for {
		select {
		case <-exited:
			code := exitStatus(cmd.ProcessState)
			if ended {
				code = ExitEnded
			}
			return &exitCode{code: code}, false
		case sig := <-sigs:
			if isInterrupt(sig) {
				interrupts++
			}
			if interrupts >= 2 {
				fmt.Fprintf(c.stderr, "plug: second interrupt: stopping %s at once\n", p.cmd[0])
				tether.Cut()
				return &exitCode{code: 128 + signalNumber(sig)}, true
			}
			forward(cmd.Process, sig)
			go stop()
		case l := <-lost:
			if ended {
				continue
			}
			ended = true
			why := "the connection to the agent is lost"
			if l.err != nil {
				why = l.err.Error()
			}
			fmt.Fprintf(c.stderr, "plug: %s%s\nplug: stopping %s\n", p.prefix(l.s.target), why, p.cmd[0])
			interrupt(cmd.Process)
			go stop()
		}
	}
}

// start starts CMD with plug's standard streams and environ (nil: plug's
// own), resolving the cluster's names when there are any, tied to plug's
// life (lifeline): CMD and what it starts never outlive plug.
func (c *cli) start(argv []string, names *consumer, environ []string) (*exec.Cmd, *lifeline.Tether, *exitCode) {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		code := ExitNoCmd
		if errors.Is(err, os.ErrPermission) {
			code = ExitNoExec
		}
		return nil, nil, &exitCode{code, fmt.Errorf("cannot run %s: %v", argv[0], err)}
	}
	cmd := exec.Command(path, argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.stdin, c.stdout, c.stderr
	cmd.Env = environ
	tether, err := lifeline.Tie(cmd)
	if err != nil {
		fmt.Fprintf(c.stderr, "plug: warning: %v; if plug is killed, %s may go on running\n", err, filepath.Base(argv[0]))
	}
	start := cmd.Start
	if names != nil {
		start = func() error { return names.start(cmd) }
	}
	err = start()
	tether.Started()
	if err != nil {
		tether.Cut()
		return nil, nil, &exitCode{ExitNoExec, fmt.Errorf("cannot run %s: %v", argv[0], err)}
	}
	return cmd, tether, nil
}

// runID returns a new run id: 128 random bits. A run id is no secret (the
// audit trail and the records of runs show it); the agents let only the
// key that opened a run act on it.
func runID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// isInterrupt reports whether sig is Ctrl-C.
func isInterrupt(sig os.Signal) bool { return sig == os.Interrupt }

// signalNumber is sig's number, for the 128+N exit code.
func signalNumber(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return int(s)
	}
	return int(syscall.SIGINT)
}
