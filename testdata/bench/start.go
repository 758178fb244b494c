package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// sessionStart measures, -starts times each, how long from starting
// `plug -s NAME:80:LOCAL -- benchtool mark` until the first request of a
// pod reaches the local process: for a name no Service has (plug creates
// it) and for benchto, a deployed Service (plug takes it over). Between
// runs it waits until the agent has given the name back.
func (d *driver) sessionStart() error {
	for _, kind := range []struct{ path, name string }{
		{"start/new", "benchnew"},
		{"start/takeover", takeoverName},
	} {
		var samples []time.Duration
		for i := range d.starts {
			took, err := d.startOnce(kind.name)
			if err != nil {
				d.fail(kind.path, fmt.Errorf("run %d: %w", i+1, err))
				break
			}
			samples = append(samples, took)
		}
		if len(samples) == 0 {
			continue
		}
		d.logf("%s: %v", kind.path, samples)
		d.rowf(kind.path, "p50_ms", ms(percentile(samples, 50)))
		d.rowf(kind.path, "max_ms", ms(slices.Max(samples)))
		d.rowf(kind.path, "runs", float64(len(samples)))
	}
	return nil
}

// takeoverName is the deployed Service of k8s.yaml that runs take over.
const takeoverName = "benchto"

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (d *driver) startOnce(name string) (time.Duration, error) {
	poller := d.pod("poll", "-ns", d.ns, "-svc", name, "-port", "80", "-timeout", "60s")
	pollOut, err := poller.StdoutPipe()
	if err != nil {
		return 0, err
	}
	var pollErr strings.Builder
	poller.Stderr = &pollErr
	if err := poller.Start(); err != nil {
		return 0, err
	}
	defer poller.Process.Kill()
	pollLines := make(chan string, 8)
	go readLines(pollOut, pollLines)
	if _, err := waitLine(pollLines, "polling", 30*time.Second); err != nil {
		return 0, fmt.Errorf("the poller: %w %s", err, pollErr.String())
	}

	started := time.Now()
	run := d.laptop(d.plug, "-p", "bench", "-s", fmt.Sprintf("%s:80:%d", name, markPort), "--",
		d.tool, "mark", "-listen", fmt.Sprintf("127.0.0.1:%d", markPort))
	runOut, err := run.StdoutPipe()
	if err != nil {
		return 0, err
	}
	var runErr strings.Builder
	run.Stderr = &runErr
	if err := run.Start(); err != nil {
		return 0, err
	}
	b := &background{name: "plug -s " + name, cmd: run, done: make(chan error, 1)}
	runLines := make(chan string, 8)
	go readLines(runOut, runLines)
	go func() { b.done <- run.Wait() }()
	first, err := waitLine(runLines, "first ", 60*time.Second)
	if err == nil {
		// The run ends only once the poller has its answer.
		if _, err = waitLine(pollLines, "reached", 10*time.Second); err != nil {
			err = fmt.Errorf("the poller: %w %s", err, pollErr.String())
		}
	}
	if stopErr := b.stop(20 * time.Second); stopErr != nil && err == nil {
		err = stopErr
	}
	if err != nil {
		return 0, fmt.Errorf("plug -s %s: %w; it said: %s", name, err, strings.TrimSpace(runErr.String()))
	}
	nanos, err := strconv.ParseInt(first, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("the marker said %q", first)
	}
	poller.Wait()
	return time.Unix(0, nanos).Sub(started), d.givenBack(name)
}

// givenBack waits until the agent gave name back: the Service plug created
// is gone, or the deployed one selects its pods again.
func (d *driver) givenBack(name string) error {
	want := ""
	if name == takeoverName {
		want = name + " " + name
	}
	return eventually(60*time.Second, name+" given back", func() error {
		out, err := output(d.kubectlCmd("get", "svc", name, "--ignore-not-found", "-o", "jsonpath={.metadata.name} {.spec.selector.app}"))
		if err != nil {
			return err
		}
		if got := strings.TrimSpace(out); got != want {
			return fmt.Errorf("the Service reads %q", got)
		}
		return nil
	})
}
