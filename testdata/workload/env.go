package main

import (
	"flag"
	"io"
	"os"
)

// printEnv writes the process's environment, one NAME=VALUE a line, or
// each ended by a NUL with -0 (values may hold newlines). Started as
// "env" (the image's /usr/bin/env), it is the command `kubectl exec … env`
// and plug's agent (`env -0`) run in the container.
func printEnv(w io.Writer, args []string) error {
	fs := flag.NewFlagSet("env", flag.ContinueOnError)
	nul := fs.Bool("0", false, "end each variable with NUL, not newline")
	if err := fs.Parse(args); err != nil {
		return err
	}
	end := "\n"
	if *nul {
		end = "\x00"
	}
	for _, kv := range os.Environ() {
		if _, err := io.WriteString(w, kv+end); err != nil {
			return err
		}
	}
	return nil
}
