// Command plug runs a developer's local process as a member of a cluster.
// The same binary is the agent inside the cluster (plug agent). See
// plug help, and the package tunnel/cli.
package main

import (
	"os"

	"plug/swarmapi/swarmplatform/relay"
	"plug/tunnel/cli"
	"plug/tunnel/cli/lifeline"
	"plug/tunnel/localnames"
)

// helpers are plug's entry points that are not commands for people, by
// their first argument, and are left out of plug's help: each takes the
// arguments after it and returns the exit code.
var helpers = map[string]func(args []string) int{
	// what the Swarm platform's relay services run
	"relay": relay.Command,
	// plug itself, as the names helper of a run's command (Linux)
	localnames.HelperArg: localnames.Helper,
	// plug itself, as the guardian of a run's command (Linux, macOS)
	lifeline.HelperArg: lifeline.Guard,
}

func main() {
	if len(os.Args) > 1 {
		if helper := helpers[os.Args[1]]; helper != nil {
			os.Exit(helper(os.Args[2:]))
		}
	}
	os.Exit(cli.Main(os.Args[1:]))
}
