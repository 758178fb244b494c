// Command workload is the one static binary behind the test images of the
// local clusters: the pause image of the Kubernetes sandbox and the test
// workload that tests deploy and call. The images hold no shell, so every
// probe a test needs inside a pod is a subcommand here.
//
//	workload pause                          sleep, reap children, exit on SIGTERM/SIGINT
//	workload serve [-name NAME] ADDR...     answer GET / with "NAME\n" on each ADDR
//	workload get [-n N] [-timeout D] URL    N requests, each on a new connection
//	workload tcp [-timeout D] ADDR          connect, copy stdin to ADDR and ADDR to stdout
//	workload lookup [-server ADDR] NAME     resolve NAME, print one address a line
//
// Started as "pause" (argv[0] ending in /pause) it behaves as "workload pause",
// so the pause image needs no arguments.
package main

import (
	"fmt"
	"os"
	"path/filepath"
)

const usage = `usage:
  workload pause
  workload serve [-name NAME] ADDR...
  workload get [-n N] [-timeout D] URL
  workload tcp [-timeout D] ADDR
  workload lookup [-server HOST:PORT] [-timeout D] NAME`

func main() {
	args := os.Args[1:]
	cmd := filepath.Base(os.Args[0])
	if cmd != "pause" {
		if len(args) == 0 {
			fail(2, usage)
		}
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "pause":
		err = pause()
	case "serve":
		err = serve(args)
	case "get":
		err = get(args)
	case "tcp":
		err = tcp(args)
	case "lookup":
		err = lookup(args)
	default:
		fail(2, fmt.Sprintf("workload: unknown command %q\n%s", cmd, usage))
	}
	if err != nil {
		fail(1, "workload "+cmd+": "+err.Error())
	}
}

func fail(code int, msg string) {
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(code)
}
