package cli

import (
	"embed"
	"fmt"
	"strings"
)

// helpUsage is the usage of plug help.
const helpUsage = `Usage: plug help [COMMAND | TOPIC]
       plug help --man

Shows the overview of plug (its commands and topics, grouped), the full
usage of COMMAND, or the reference text of TOPIC. Every command also takes
-h or --help. With --man, prints all of it as a man page (roff), which
./build.sh release writes to dist/plug.1:

  plug help --man >~/.local/share/man/man1/plug.1

Examples:
  plug help
  plug help run
  plug help troubleshooting | less
  man <(plug help --man)
`

// topic is a page of plug's reference that is no command: plug help NAME
// prints topics/NAME.txt.
type topic struct {
	name     string
	synopsis string // one line for the overview
}

// topics is plug's reference beyond the commands' usages, in the order of
// the man page. Each has its text in topics/NAME.txt and its place in one
// of the groups.
var topics = []topic{
	{"install", "install plug from an agent, or through kubectl port-forward"},
	{"takeover", "what -s does to a name, and how the name is given back"},
	{"personal", "only your requests reach you (--header, --path)"},
	{"udp", "serving a UDP port (-s NAME:PORT:LOCALPORT/udp)"},
	{"names", "the cluster's names a run reaches, UDP, several profiles"},
	{"env", "a workload's environment for CMD (--env-from)"},
	{"volumes", "a workload's volume on this machine (-v, --volume)"},
	{"dockerrun", "CMD in a local Docker container (--dockerrun)"},
	{"lifetime", "CMD's terminal, its signals and its end; reconnects"},
	{"openssh", "plain OpenSSH as a client of the agent"},
	{"versions", "updating plug and the agent; which versions work together"},
	{"hosts", "how names resolve on Linux, macOS, Windows; plug setup"},
	{"files", "what plug keeps on this machine"},
	{"environment", "the environment variables plug reads"},
	{"exit-codes", "plug's exit codes"},
	{"troubleshooting", "plug's messages by symptom: what they mean, what to do"},
}

//go:embed topics/*.txt
var topicFiles embed.FS

// topicText returns the text of the topic called name, and whether there
// is one.
func topicText(name string) (string, bool) {
	for _, t := range topics {
		if t.name == name {
			b, err := topicFiles.ReadFile("topics/" + name + ".txt")
			if err != nil {
				panic("plug help: topic " + name + " has no text: " + err.Error())
			}
			return string(b), true
		}
	}
	return "", false
}

// groups orders the overview: each group names its commands and topics.
// Every command and every topic is in exactly one group (a test checks).
var groups = []struct {
	title string
	names []string
}{
	{"Run", []string{"run", "takeover", "personal", "udp", "names", "env", "volumes", "dockerrun", "lifetime", "openssh"}},
	{"Profiles and keys", []string{"keygen", "pubkey", "ls", "rn", "profile", "doctor", "install"}},
	{"Team", []string{"who", "end", "members", "ui"}},
	{"This machine", []string{"setup", "update", "version", "completion", "help", "versions", "hosts", "files", "environment", "exit-codes", "troubleshooting"}},
	{"Server side", []string{"agent", "smb"}},
}

// runHelp is plug help.
func runHelp(c *cli, args []string) error {
	fs := flags("help")
	man := fs.Bool("man", false, "")
	pos, err := c.parse("help", fs, args, true)
	if err != nil {
		return err
	}
	switch {
	case *man && len(pos) > 0:
		return usageError("help", "help: --man prints everything; give no command or topic with it")
	case *man:
		fmt.Fprint(c.stdout, manPage(c.commands))
	case len(pos) == 0:
		fmt.Fprint(c.stdout, overview(c.commands))
	case len(pos) > 1:
		return usageError("help", "help: give one command or topic, not %d", len(pos))
	case c.lookup(pos[0]) != nil:
		fmt.Fprint(c.stdout, c.lookup(pos[0]).usage)
	default:
		text, ok := topicText(pos[0])
		if !ok {
			return usageError("help", "help: there is no command or topic %q; plug help lists them", pos[0])
		}
		fmt.Fprint(c.stdout, text)
	}
	return nil
}

// overviewRow returns the overview's row of the command or topic called
// name: a topic's as the plug help that shows it.
func overviewRow(commands []*command, name string) (string, string) {
	for _, c := range commands {
		if c.name == name {
			return c.name, c.synopsis
		}
	}
	for _, t := range topics {
		if t.name == name {
			return "help " + t.name, t.synopsis
		}
	}
	return name, ""
}

// overview is the text of `plug help`: the commands and topics by group.
func overview(commands []*command) string {
	var b strings.Builder
	b.WriteString(`plug runs a local process as a member of a cluster: it answers under a
cluster name, and reaches the cluster's services by theirs.

Usage:
  plug [-p PROFILE]... [-s NAME:CLUSTERPORT:LOCALPORT]... [-c] [--] CMD [ARG...]
      runs CMD as a member of each PROFILE's cluster (plug help run)
  plug COMMAND [ARGUMENTS]
  plug help COMMAND|TOPIC    a command's usage, or a topic of the reference
`)
	for _, g := range groups {
		fmt.Fprintf(&b, "\n%s:\n", g.title)
		for _, name := range g.names {
			b.WriteString(wrapRow(overviewRow(commands, name)))
		}
	}
	b.WriteString(`
First steps: the installer creates a profile for your cluster; then
  plug keygen -p PROFILE
  plug pubkey -p PROFILE       the key to deposit, or to have accepted
  plug -p PROFILE -s web:8080:3000 -- npm start

Exit codes: CMD's own; 1 refused or failed; 2 bad usage; 3 could not
connect or serve, CMD not started; 4 the run was ended (plug help exit-codes).
Files: ~/.plug, or $PLUG_HOME (plug help files).
`)
	return b.String()
}

// wrapRow is one row of the overview: name, then text beside it.
func wrapRow(name, text string) string {
	return hanging("  "+name, 23, text)
}

// hanging is first, padded to indent columns, then text wrapped to 80
// columns beside it, its next lines indented by indent, ending in a newline.
func hanging(first string, indent int, text string) string {
	var b strings.Builder
	line := fmt.Sprintf("%-*s", indent, first)
	width := len(line)
	for _, w := range strings.Fields(text) {
		if width > indent && width+1+len(w) > 80 {
			b.WriteString(line + "\n")
			line, width = strings.Repeat(" ", indent), indent
		}
		if width > indent {
			line += " "
			width++
		}
		line += w
		width += len(w)
	}
	b.WriteString(line + "\n")
	return b.String()
}
