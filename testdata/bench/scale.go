package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// scale measures the agent's memory idle, then starts -runs runs of
// `plug -s benchloadNN:9000:PORT -- benchtool serve 127.0.0.1:PORT` at
// once, has a pod keep two echo connections per name busy for a few
// seconds, and reports how long until all answered, the requests and
// errors, and the agent's peak memory meanwhile.
func (d *driver) scale() error {
	idle, err := d.agent.settle()
	if err != nil {
		return err
	}
	d.rowf("agent", "rss_idle_mb", mb(idle))
	d.agent.reset()
	var procs []*background
	defer func() {
		if err := stopAll(procs, 30*time.Second); err != nil {
			d.logf("stopping the runs: %v", err)
		}
	}()
	var targets []string
	started := time.Now()
	for i := range d.runs {
		name := fmt.Sprintf("benchload%02d", i+1)
		port := strconv.Itoa(loadBasePort + i)
		b, err := d.start("run-"+name, d.laptop(d.plug, "-p", "bench", "-s", name+":"+strconv.Itoa(serverPort)+":"+port, "--",
			d.tool, "serve", "127.0.0.1:"+port))
		if err != nil {
			return err
		}
		procs = append(procs, b)
		targets = append(targets, name+":"+strconv.Itoa(serverPort))
	}
	loadStarted := time.Now()
	out, err := output(d.pod("load", "-targets", strings.Join(targets, ","), "-conns", "2", "-duration", "5s", "-wait", "120s"))
	if err != nil {
		return err
	}
	peak := d.agent.peak()
	alive := 0
	for _, p := range procs {
		if !p.exited() {
			alive++
		}
	}
	result := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(line, ","); ok {
			result[k] = v
		}
	}
	d.rowf("runs", "runs", float64(d.runs))
	d.rowf("runs", "alive", float64(alive))
	if waited, err := strconv.ParseFloat(result["ready_ms"], 64); err == nil {
		d.rowf("runs", "ready_ms", ms(loadStarted.Sub(started))+waited)
	}
	d.row("runs", "ops", result["ops"])
	d.row("runs", "errors", result["errors"])
	d.rowf("agent", "rss_runs_mb", mb(peak))
	d.logf("%d runs, %d alive after the load, %s requests, %s errors, agent peak %.1f MB", d.runs, alive, result["ops"], result["errors"], mb(peak))
	return nil
}

func mb(bytes int64) float64 { return float64(bytes) / 1e6 }
