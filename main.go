// Command plug runs a developer's local process as a member of a cluster.
// The same binary is the agent inside the cluster (plug agent). See
// plug help, and the package tunnel/cli.
package main

import (
	"os"

	"plug/tunnel/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
