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
		pos, err := c.parse("version", fs, args, true)
		if err != nil {
			return err
		}
		if len(pos) > 0 {
			return usageError("version", "version takes no arguments, got %q", pos[0])
		}
		fmt.Fprintf(c.stdout, "plug %s %s/%s %s\n", tunnel.Version, runtime.GOOS, runtime.GOARCH, runtime.Version())
		return nil
	},
}
