package main

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// sessionStart measures, -starts times each, how long from starting
// `plug -s NAME:80:LOCAL -- benchtool mark` until the first request of a
// pod reaches the local process: for a name no Service has (plug creates
// it) and for benchto, a deployed Service (plug takes it over). It also
// notes when plug said the name was served: the rest is the cluster's
// own work (kube-proxy programming the Service). Between runs it waits
// until the agent has given the name back.
func (d *driver) sessionStart() error {
	for _, kind := range []struct{ path, name string }{
		{"start/new", "benchnew"},
		{"start/takeover", takeoverName},
	} {
		var samples, served []time.Duration
		for i := range d.starts {
			took, said, err := d.startOnce(kind.name)
			if err != nil {
				d.fail(kind.path, fmt.Errorf("run %d: %w", i+1, err))
				break
			}
			samples = append(samples, took)
			if said >= 0 {
				served = append(served, said)
			}
		}
		if len(samples) == 0 {
			continue
		}
		d.logf("%s: %v; served after %v", kind.path, samples, served)
		d.rowf(kind.path, "p50_ms", ms(percentile(samples, 50)))
		d.rowf(kind.path, "max_ms", ms(slices.Max(samples)))
		d.rowf(kind.path, "runs", float64(len(samples)))
		if len(served) > 0 {
			d.rowf(kind.path, "served_p50_ms", ms(percentile(served, 50)))
		}
	}
	return d.clusterFloor()
}

// stderrWatch reads what a run says on stderr, and notes when it said
// that a name is served ("NAME:PORT → localhost:PORT").
type stderrWatch struct {
	done   chan struct{} // closed when stderr ended
	mu     sync.Mutex
	lines  []string
	served time.Time
}

func watchServed(r io.Reader) *stderrWatch {
	w := &stderrWatch{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			w.mu.Lock()
			if w.served.IsZero() && strings.Contains(sc.Text(), "→ localhost:") {
				w.served = time.Now()
			}
			w.lines = append(w.lines, sc.Text())
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *stderrWatch) text() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.lines, "\n")
}

// takeoverName is the deployed Service of k8s.yaml that runs take over.
const takeoverName = "benchto"

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// startOnce returns how long until the first request reached the local
// process, and until plug said the name was served (-1 if it did not).
func (d *driver) startOnce(name string) (time.Duration, time.Duration, error) {
	poller := d.pod("poll", "-ns", d.ns, "-svc", name, "-port", "80", "-timeout", "60s")
	pollOut, err := poller.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	var pollErr strings.Builder
	poller.Stderr = &pollErr
	if err := poller.Start(); err != nil {
		return 0, 0, err
	}
	defer poller.Process.Kill()
	pollLines := make(chan string, 8)
	go readLines(pollOut, pollLines)
	if _, err := waitLine(pollLines, "polling", 30*time.Second); err != nil {
		return 0, 0, fmt.Errorf("the poller: %w %s", err, pollErr.String())
	}

	started := time.Now()
	run := d.laptop(d.plug, "-p", "bench", "-s", fmt.Sprintf("%s:80:%d", name, markPort), "--",
		d.tool, "mark", "-listen", fmt.Sprintf("127.0.0.1:%d", markPort))
	runOut, err := run.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	runStderr, err := run.StderrPipe()
	if err != nil {
		return 0, 0, err
	}
	if err := run.Start(); err != nil {
		return 0, 0, err
	}
	said := watchServed(runStderr)
	b := &background{name: "plug -s " + name, cmd: run, done: make(chan error, 1)}
	runLines := make(chan string, 8)
	go readLines(runOut, runLines)
	go func() { <-said.done; b.done <- run.Wait() }()
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
		return 0, 0, fmt.Errorf("plug -s %s: %w; it said: %s", name, err, said.text())
	}
	nanos, err := strconv.ParseInt(first, 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("the marker said %q", first)
	}
	poller.Wait()
	served := time.Duration(-1)
	if !said.served.IsZero() {
		served = said.served.Sub(started)
	}
	return time.Unix(0, nanos).Sub(started), served, d.givenBack(name)
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

// clusterFloor measures, -starts times, the cluster's own part of a
// session start: a Service and an EndpointSlice created the way the agent
// creates them for a new name (by kubectl, pointing at the deployed
// benchto pod), from the moment both exist until a pod's request reaches
// the pod. plug's "first request" less "served" compares with it.
func (d *driver) clusterFloor() error {
	out, err := output(d.kubectlCmd("get", "pod", "-l", "app="+takeoverName, "-o", "jsonpath={.items[0].status.podIP}"))
	if err != nil {
		return err
	}
	ip := strings.TrimSpace(out)
	var samples []time.Duration
	for i := range d.starts {
		took, err := d.floorOnce(ip)
		if err != nil {
			d.fail("start/floor", fmt.Errorf("run %d: %w", i+1, err))
			break
		}
		samples = append(samples, took)
	}
	if len(samples) == 0 {
		return nil
	}
	d.logf("start/floor: %v", samples)
	d.rowf("start/floor", "p50_ms", ms(percentile(samples, 50)))
	d.rowf("start/floor", "max_ms", ms(slices.Max(samples)))
	d.rowf("start/floor", "runs", float64(len(samples)))
	return nil
}

const floorName = "benchfloor"

func (d *driver) floorOnce(podIP string) (time.Duration, error) {
	poller := d.pod("poll", "-ns", d.ns, "-svc", floorName, "-port", "80", "-want", "deployed", "-timeout", "60s")
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
	lines := make(chan string, 8)
	go readLines(pollOut, lines)
	if _, err := waitLine(lines, "polling", 30*time.Second); err != nil {
		return 0, fmt.Errorf("the poller: %w %s", err, pollErr.String())
	}
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: %[1]s}
spec:
  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: %[1]s-1
  labels: {kubernetes.io/service-name: %[1]s}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints: [{addresses: ["%[2]s"], conditions: {ready: true}}]
`, floorName, podIP)
	create := d.kubectlCmd("create", "-f", "-")
	create.Stdin = strings.NewReader(manifest)
	_, err = output(create)
	created := time.Now()
	defer func() {
		output(d.kubectlCmd("delete", "--ignore-not-found", "svc/"+floorName, "endpointslice/"+floorName+"-1"))
	}()
	if err != nil {
		return 0, err
	}
	reached, err := waitLine(lines, "reached", 30*time.Second)
	if err != nil {
		return 0, fmt.Errorf("the poller: %w %s", err, pollErr.String())
	}
	nanos, err := strconv.ParseInt(reached, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("the poller said %q", reached)
	}
	return time.Unix(0, nanos).Sub(created), nil
}
