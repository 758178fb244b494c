package cli

import (
	"fmt"
	"strings"
)

// helpUsage is the usage of plug help.
const helpUsage = `Usage: plug help [COMMAND]

Shows the overview of plug, or the full usage of COMMAND.
Every command also takes -h or --help.
`

// runHelp is plug help.
func runHelp(c *cli, args []string) error {
	fs := flags("help")
	pos, err := c.parse("help", fs, args, true)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0:
		fmt.Fprint(c.stdout, overview(c.commands))
	case len(pos) > 1:
		return usageError("help", "help: give one command, not %d", len(pos))
	case c.lookup(pos[0]) != nil:
		fmt.Fprint(c.stdout, c.lookup(pos[0]).usage)
	default:
		return usageError("", "help: there is no command %q", pos[0])
	}
	return nil
}

// overview is the text of `plug help`, listing commands.
func overview(commands []*command) string {
	var b strings.Builder
	b.WriteString(`plug runs a local process as a member of a cluster: it answers under a
cluster name, and reaches the cluster's services by theirs.

Usage:
  plug [-p PROFILE]... [-s NAME:CLUSTERPORT:LOCALPORT]... [-c] [--] CMD [ARGS...]
      runs CMD as a member of each PROFILE's cluster (plug help run)
  plug COMMAND [ARGUMENTS]

Commands:
`)
	for _, c := range commands {
		if c.name != "run" {
			fmt.Fprintf(&b, "  %-9s %s\n", c.name, c.synopsis)
		}
	}
	b.WriteString(`
First steps: the installer creates a profile for your cluster; then
  plug keygen -p PROFILE
  plug pubkey -p PROFILE       the key to deposit, or to have accepted
  plug -p PROFILE -s web:8080:3000 -- npm start

Exit codes:
  a run exits with CMD's own code, or 128+N when CMD was killed by signal N;
  1    the command was refused or failed
  2    bad usage; nothing was contacted
  3    a run could not connect to an agent or serve a name; CMD was not started
  4    the run was ended by the agent, or its connection lost for good; CMD was stopped
  126  CMD is not executable; 127 CMD was not found

Files: profiles and keys live in ~/.plug ($PLUG_HOME overrides it).
Run "plug help COMMAND" for the usage of one command ("plug help run" for runs).
`)
	return b.String()
}
