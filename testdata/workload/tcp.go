package main

import (
	"flag"
	"io"
	"net"
	"os"
	"time"
)

// tcp connects to ADDR, copies stdin to it and everything it sends to
// stdout, and returns when the connection ends.
func tcp(args []string) error {
	fs := flag.NewFlagSet("tcp", flag.ExitOnError)
	timeout := fs.Duration("timeout", 5*time.Second, "time limit of the connect")
	if err := parseArgs(fs, args, 1, "give exactly one address, e.g. name:2222"); err != nil {
		return err
	}
	conn, err := net.DialTimeout("tcp", fs.Arg(0), *timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	go func() {
		io.Copy(conn, os.Stdin)
		conn.(*net.TCPConn).CloseWrite()
	}()
	_, err = io.Copy(os.Stdout, conn)
	return err
}
