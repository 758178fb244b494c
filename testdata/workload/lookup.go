package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"time"
)

// lookup resolves NAME and prints each address on its own line. With
// -server it asks that DNS server directly instead of the resolver of
// /etc/resolv.conf.
func lookup(args []string) error {
	fs := flag.NewFlagSet("lookup", flag.ExitOnError)
	server := fs.String("server", "", "DNS server to ask, HOST:PORT (default: from /etc/resolv.conf)")
	timeout := fs.Duration("timeout", 5*time.Second, "time limit of the lookup")
	if err := parseArgs(fs, args, 1, "give exactly one name, e.g. kubernetes.default"); err != nil {
		return err
	}
	r := net.DefaultResolver
	if *server != "" {
		r = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, *server)
		}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	addrs, err := r.LookupHost(ctx, fs.Arg(0))
	if err != nil {
		return err
	}
	for _, a := range addrs {
		fmt.Println(a)
	}
	return nil
}
