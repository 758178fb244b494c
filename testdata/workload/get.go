package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// get requests URL n times, each time on a new connection (so every request
// is balanced anew by kube-proxy or the Swarm resolver), and prints each body
// on its own line. It fails on the first error or non-2xx answer.
func get(args []string) error {
	fs := flag.NewFlagSet("get", flag.ExitOnError)
	n := fs.Int("n", 1, "number of requests")
	timeout := fs.Duration("timeout", 5*time.Second, "time limit of each request")
	if err := parseArgs(fs, args, 1, "give exactly one URL, e.g. http://name:8080/"); err != nil {
		return err
	}
	return getEach(os.Stdout, fs.Arg(0), *n, *timeout)
}

// getEach does the n requests of get, writing the bodies to out.
func getEach(out io.Writer, url string, n int, timeout time.Duration) error {
	client := &http.Client{
		Timeout:   timeout,
		Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
	}
	for i := 0; i < n; i++ {
		body, err := fetch(client, url)
		if err != nil {
			return fmt.Errorf("request %d of %d: %w", i+1, n, err)
		}
		fmt.Fprintln(out, strings.TrimRight(body, "\n"))
	}
	return nil
}

func fetch(client *http.Client, url string) (string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode/100 != 2 {
		return "", fmt.Errorf("%s answered %s", url, resp.Status)
	}
	return string(body), nil
}
