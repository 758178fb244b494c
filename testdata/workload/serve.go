package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// serve answers HTTP/1.1 and HTTP/2 with prior knowledge (h2c) on every
// address given; a call framed as gRPC is echoed (grpcEcho), and a
// connection that does not start like HTTP is answered "NAME not HTTP". GET / returns the workload's
// name (with -upstream, followed by what a GET of that URL answered, so a
// two-service app shows who answers its backend's name); GET /log returns one line per request seen so far ("REMOTE PATH"),
// not counting requests for /log and /whoami, so a test can prove a process
// was never reached; GET /whoami returns the identity the process runs as.
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	name := fs.String("name", defaultName(), "the name GET / answers with")
	upstream := fs.String("upstream", "", "a URL whose answer GET / appends to the name")
	fs.Parse(args)
	if fs.NArg() == 0 {
		return errors.New("give at least one address to listen on, e.g. :8080")
	}
	mux := handler(*name, *upstream, &requestLog{})
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: &protocols}
	errs := make(chan error, fs.NArg())
	for _, addr := range fs.Args() {
		go func() {
			log.Printf("%s serving on %s", *name, addr)
			l, err := net.Listen("tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			errs <- srv.Serve(newNotHTTPListener(l, *name))
		}()
	}
	return <-errs
}

// handler answers GET / with name (and upstream's answer, when set) and
// GET /log with seen.
func handler(name, upstream string, seen *requestLog) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /log", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, seen.String())
	})
	mux.HandleFunc("GET /whoami", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, whoami())
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		seen.add(r.RemoteAddr + " " + r.URL.Path)
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			grpcEcho(name, w, r)
			return
		}
		if upstream == "" {
			fmt.Fprintln(w, name)
			return
		}
		fmt.Fprintf(w, "%s -> %s\n", name, askUpstream(upstream))
	})
	return mux
}

// defaultName is $WORKLOAD_NAME, else the host name (the pod name).
func defaultName() string {
	if n := os.Getenv("WORKLOAD_NAME"); n != "" {
		return n
	}
	n, _ := os.Hostname()
	return n
}

// requestLog is the list of requests a server has answered.
type requestLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *requestLog) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
}

func (l *requestLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == 0 {
		return ""
	}
	return strings.Join(l.lines, "\n") + "\n"
}

// upstreamClient asks the upstream on a new connection each time, so a
// switch of what answers its name shows at once.
var upstreamClient = &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// askUpstream returns the trimmed answer of url, or what went wrong.
func askUpstream(url string) string {
	body, err := fetch(upstreamClient, url)
	if err != nil {
		return "error: " + err.Error()
	}
	return strings.TrimSpace(body)
}
