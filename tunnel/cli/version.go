package cli

import (
	"fmt"
	"runtime"

	"plug/tunnel"
)

var versionCommand = &command{
	name:     "version",
	synopsis: "print plug's version",
	usage: `Usage: plug version

Prints plug's version, the platform it was built for and the Go version.
`,
	run: func(c *cli, args []string) error {
		fs := flags("version")
		if err := c.parseFlags("version", fs, args); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "plug %s %s/%s %s\n", tunnel.Version, runtime.GOOS, runtime.GOARCH, runtime.Version())
		return nil
	},
}
