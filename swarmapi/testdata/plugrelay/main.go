// Command plugrelay stands in for the plug binary in the relay image the
// swarmapi tests build, so they run the relay code of the tree under test:
// like plug, it is the image's /plug and understands `relay ...`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"plug/swarmapi/relay"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "relay" {
		fmt.Fprintln(os.Stderr, "usage: "+relay.Usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := relay.Main(ctx, os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "plug relay:", err)
		os.Exit(1)
	}
}
