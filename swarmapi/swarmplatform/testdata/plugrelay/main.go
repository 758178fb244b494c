// Command plugrelay stands in for the plug binary in the relay image the
// swarmplatform tests build, so they run the relay code of the tree under test:
// like plug, it is the image's /plug and understands `relay ...`.
package main

import (
	"fmt"
	"os"

	"plug/swarmapi/swarmplatform/relay"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "relay" {
		fmt.Fprintln(os.Stderr, "usage: "+relay.Usage)
		os.Exit(2)
	}
	os.Exit(relay.Command(os.Args[2:]))
}
