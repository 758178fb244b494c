package cli

import (
	"fmt"
	"runtime"

	"plug/tunnel"
)

// versionUsage is the usage of plug version.
const versionUsage = `Usage: plug version

Prints plug's version (the release tag vX.Y.Z it was built from, else the
commit), the platform it was built for and the Go version; then the commit
and its time, which is the build time: two builds of one commit are the
same file (./build.sh reproducible checks it).

Example:
  plug version
`

// runVersion is plug version.
func runVersion(c *cli, args []string) error {
	fs := flags("version")
	if err := c.parseFlags("version", fs, args); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "plug %s %s/%s %s\n", tunnel.Version, runtime.GOOS, runtime.GOARCH, runtime.Version())
	if tunnel.Commit == "" {
		fmt.Fprintln(c.stdout, "commit unknown (not built by build.sh)")
	} else {
		fmt.Fprintf(c.stdout, "commit %s, built %s\n", tunnel.Commit, tunnel.BuildTime)
	}
	return nil
}
