package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"go.etcd.io/etcd/server/v3/embed"
)

// runEtcd runs a one-member etcd for the apiserver, on loopback only, until
// SIGTERM or SIGINT. The cluster is thrown away after the tests, so fsync is
// off.
func runEtcd() int {
	fs := flag.NewFlagSet("etcd", flag.ExitOnError)
	dir := fs.String("data-dir", "", "where etcd keeps its data (required)")
	client := fs.String("listen-client", "http://127.0.0.1:2379", "the URL clients connect to")
	peer := fs.String("listen-peer", "http://127.0.0.1:2380", "the URL of the member's peer port")
	fs.Parse(os.Args[1:])
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "etcd: -data-dir is required")
		return 2
	}
	cu, err := url.Parse(*client)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd: -listen-client: %v\n", err)
		return 2
	}
	pu, err := url.Parse(*peer)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd: -listen-peer: %v\n", err)
		return 2
	}

	cfg := embed.NewConfig()
	cfg.Name = "plug-test"
	cfg.Dir = *dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "warn"

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd: %v\n", err)
		return 1
	}
	defer e.Close()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-e.Server.ReadyNotify():
		fmt.Fprintln(os.Stderr, "etcd: ready on", cu)
	case err := <-e.Err():
		fmt.Fprintf(os.Stderr, "etcd: %v\n", err)
		return 1
	}
	select {
	case <-stop:
		return 0
	case err := <-e.Err():
		fmt.Fprintf(os.Stderr, "etcd: %v\n", err)
		return 1
	}
}
