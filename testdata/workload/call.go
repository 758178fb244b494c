package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

// call is a caller of a service, to count what its callers see while the
// service changes hands: until SIGTERM or SIGINT (or -for), it sends GET
// URL every -every on a new connection each time (stream "new", balanced
// anew each time) and, as often, on one keep-alive connection (stream
// "keep", reconnecting only when that connection is closed). Each request
// is one line on stdout:
//
//	TIME STREAM ok ANSWER conn=PORT
//	TIME STREAM fail ERROR
//
// TIME is when the request was sent, RFC 3339 with nanoseconds (UTC),
// ANSWER the first line of the body, PORT the caller's local port (a new
// one on "keep" means a new connection). A non-2xx answer is a failure.
func call(args []string) error {
	fs := flag.NewFlagSet("call", flag.ExitOnError)
	every := fs.Duration("every", 50*time.Millisecond, "time between two requests of a stream")
	timeout := fs.Duration("timeout", 2*time.Second, "time limit of each request")
	limit := fs.Duration("for", 0, "stop after this long (0: at SIGTERM or SIGINT only)")
	if err := parseArgs(fs, args, 1, "give exactly one URL, e.g. http://web/"); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *limit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *limit)
		defer cancel()
	}
	out := &lineWriter{w: os.Stdout}
	fresh := &http.Client{Timeout: *timeout, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	kept := &http.Client{Timeout: *timeout, Transport: &http.Transport{MaxIdleConnsPerHost: 1, Proxy: nil}}
	var wg sync.WaitGroup
	wg.Go(func() { callEvery(ctx, out, "new", fresh, fs.Arg(0), *every) })
	wg.Go(func() { callEvery(ctx, out, "keep", kept, fs.Arg(0), *every) })
	wg.Wait()
	return nil
}

// callEvery sends GET url with client every period until ctx ends,
// writing one line per request to out.
func callEvery(ctx context.Context, out *lineWriter, stream string, client *http.Client, url string, period time.Duration) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		sent := time.Now().UTC().Format(time.RFC3339Nano)
		answer, port, err := callOnce(client, url)
		if err != nil {
			out.line(fmt.Sprintf("%s %s fail %s", sent, stream, strings.ReplaceAll(err.Error(), "\n", " ")))
			continue
		}
		out.line(fmt.Sprintf("%s %s ok %s conn=%d", sent, stream, answer, port))
	}
}

// callOnce sends one GET and returns the first line of the answer and the
// local port of the connection it went over.
func callOnce(client *http.Client, url string) (answer string, port int, err error) {
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if a, ok := info.Conn.LocalAddr().(*net.TCPAddr); ok {
			port = a.Port
		}
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, url, nil)
	if err != nil {
		return "", 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", port, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", port, err
	}
	if resp.StatusCode/100 != 2 {
		return "", port, fmt.Errorf("%s answered %s", url, resp.Status)
	}
	first, _, _ := strings.Cut(string(body), "\n")
	return strings.TrimSpace(first), port, nil
}

// lineWriter writes whole lines, one at a time.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) line(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	io.WriteString(l.w, s+"\n")
}
