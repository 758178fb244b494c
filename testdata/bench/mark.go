package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// pollPath is the path the session-start poller asks for: the marker
// counts only those requests, never the tunnel's own probes.
const pollPath = "/bench-poll"

// localAnswer is what the marker answers, telling the local process from a
// deployed one.
const localAnswer = "local"

// mark answers HTTP on -listen with "local" and prints, once, the moment the
// first request for pollPath arrived: "first UNIXNANO". It is the local
// process of a session-start measurement and runs until signalled.
func mark(args []string) error {
	fs := flag.NewFlagSet("mark", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:18080", "address to answer on")
	fs.Parse(args)
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	var once sync.Once
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == pollPath {
			now := time.Now()
			once.Do(func() { fmt.Printf("first %d\n", now.UnixNano()) })
		}
		fmt.Fprintln(w, localAnswer)
	})
	errs := make(chan error, 1)
	go func() { errs <- http.Serve(l, h) }()
	if err := untilSignal(errs); !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}
