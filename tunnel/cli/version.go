package cli

import (
	"fmt"
	"runtime"

	"plug/tunnel"
)

// versionUsage is the usage of plug version.
const versionUsage = `Usage: plug version

Prints plug's version, the platform it was built for and the Go version.
`

// runVersion is plug version.
func runVersion(c *cli, args []string) error {
	fs := flags("version")
	if err := c.parseFlags("version", fs, args); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "plug %s %s/%s %s\n", tunnel.Version, runtime.GOOS, runtime.GOARCH, runtime.Version())
	return nil
}
