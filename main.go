// Command plug runs a developer's local process as a member of a cluster.
// The same binary is the agent inside the cluster (plug agent). See
// plug help, and the package tunnel/cli.
package main

import (
	"os"

	"plug/swarmapi/relay"
	"plug/tunnel/cli"
)

func main() {
	// plug relay is what the Swarm platform's relay services run, not a
	// command for people: it is left out of plug's help.
	if len(os.Args) > 1 && os.Args[1] == "relay" {
		os.Exit(relay.Command(os.Args[2:]))
	}
	os.Exit(cli.Main(os.Args[1:]))
}
