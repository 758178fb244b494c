// Command benchtool measures plug's tunnel against raw TCP and OpenSSH on
// the local cluster: the same binary serves in the cluster's pods and on the
// "laptop" side, measures any path to such a server, and drives a whole
// benchmark profile. run.sh (./build.sh bench) is its user.
//
//	benchtool serve ADDR...        answer the bench protocol (wire.go) and a UDP echo on each ADDR
//	benchtool idle                 sleep until signalled (a pod to exec into)
//	benchtool suite -addr A        measure one path: throughput, latency, setup, concurrency
//	benchtool udp -addr A          measure one UDP path to an echo: round trips, throughput, loss
//	benchtool mark -listen A       HTTP server telling when the first poll reached it
//	benchtool poll -svc NAME       (in a pod) poll a Service until the local process answers
//	benchtool load -targets A,B    (in a pod) request/response load over many targets
//	benchtool link -a A -b B       a delayed, lossy link between two TUN devices (netem's stand-in)
//	benchtool drive ...            one netem profile, every measurement, CSV rows
//	benchtool footprint ...        binary and image sizes, dependency count, CSV rows
//	benchtool report ...           the CSV as a Markdown table with ratios and targets
//	benchtool names ...            cost against the namespace's size, CSV rows (scale.sh)
//	benchtool seen NAME KNOWN      (a run's command) say up, ready once KNOWN resolves, seen once NAME does
//	benchtool scalereport ...      names' CSV as a Markdown section and an SVG plot
package main

import (
	"fmt"
	"os"
)

const usage = `usage: benchtool serve|idle|suite|udp|mark|poll|load|link|drive|footprint|report|names|seen|scalereport [flags]
(benchtool CMD -h shows the flags of CMD)`

func main() {
	if len(os.Args) < 2 {
		fail(2, usage)
	}
	cmds := map[string]func([]string) error{
		"serve":       serve,
		"idle":        idle,
		"suite":       suite,
		"udp":         udpSuite,
		"mark":        mark,
		"poll":        poll,
		"load":        load,
		"link":        link,
		"drive":       drive,
		"footprint":   footprint,
		"report":      report,
		"names":       names,
		"seen":        seen,
		"scalereport": scaleReport,
	}
	run := cmds[os.Args[1]]
	if run == nil {
		fail(2, fmt.Sprintf("benchtool: unknown command %q\n%s", os.Args[1], usage))
	}
	if err := run(os.Args[2:]); err != nil {
		fail(1, "benchtool "+os.Args[1]+": "+err.Error())
	}
}

func fail(code int, msg string) {
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(code)
}
