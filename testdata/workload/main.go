// Command workload is the one static binary behind the test images of the
// local clusters: the pause image of the Kubernetes sandbox and the test
// workload that tests deploy and call. The images hold no shell, so every
// probe a test needs inside a pod is a subcommand here.
//
//	workload pause                          sleep, reap children, exit on SIGTERM/SIGINT
//	workload serve [-name NAME] ADDR...     answer GET / with "NAME\n" on each ADDR
//	workload get [-n N] [-timeout D] URL    N requests, each on a new connection
//	workload call [-every D] [-timeout D] [-for D] URL
//	                                        requests every D, on new connections and on one kept alive, one line each
//	workload tcp [-timeout D] ADDR          connect, copy stdin to ADDR and ADDR to stdout
//	workload udpecho ADDR                   send each datagram received on ADDR back
//	workload udpsend [-n N] [-timeout D] ADDR MSG
//	                                        send N datagrams "MSG I" from one socket, print each reply
//	workload udpbench [-rr N] [-for D] ADDR  round trips and throughput to a UDP echo, one line
//	workload lookup [-server ADDR] NAME     resolve NAME, print one address a line
//	workload env [-0]                       print the environment, a line (or NUL) each
//	workload cat FILE...                    print the files
//	workload stat FILE                      print the file's uid, gid and size
//	workload write FILE TEXT                write TEXT to FILE (mode 0644)
//
// Started as "pause" (argv[0] ending in /pause) it behaves as "workload pause",
// so the pause image needs no arguments; started as "env" (the workload
// image's /usr/bin/env) it behaves as "workload env", and as "cat" (its
// /bin/cat) as "workload cat".
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

const usage = `usage:
  workload pause
  workload serve [-name NAME] ADDR...
  workload get [-n N] [-timeout D] URL
  workload call [-every D] [-timeout D] [-for D] URL
  workload tcp [-timeout D] ADDR
  workload udpecho ADDR
  workload udpsend [-n N] [-timeout D] ADDR MSG
  workload udpbench [-rr N] [-for D] ADDR
  workload lookup [-server HOST:PORT] [-timeout D] NAME
  workload env [-0]
  workload cat FILE...
  workload stat FILE
  workload write FILE TEXT`

func main() {
	args := os.Args[1:]
	cmd := filepath.Base(os.Args[0])
	if cmd != "pause" && cmd != "env" && cmd != "cat" {
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
	case "call":
		err = call(args)
	case "tcp":
		err = tcp(args)
	case "udpecho":
		err = udpEcho(args)
	case "udpsend":
		err = udpSend(args)
	case "udpbench":
		err = udpBench(args)
	case "lookup":
		err = lookup(args)
	case "env":
		err = printEnv(os.Stdout, args)
	case "cat":
		err = catFiles(args)
	case "stat":
		err = statFile(args)
	case "write":
		err = writeFile(args)
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

// parseArgs parses args into fs (which exits on a bad flag) and wants
// exactly n arguments after the flags; want says which, for the error.
func parseArgs(fs *flag.FlagSet, args []string, n int, want string) error {
	fs.Parse(args)
	if fs.NArg() != n {
		return errors.New(want)
	}
	return nil
}
