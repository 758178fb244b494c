package cli

import (
	"fmt"
	"strings"

	"plug/tunnel"
)

// manPage is plug's manual as a man page (roff): the overview, every
// command's usage and every topic, as plug help shows them. It holds no
// date, so two builds of one commit write the same page.
func manPage(commands []*command) string {
	var b strings.Builder
	b.WriteString(".TH PLUG 1 \"\" \"plug " + roffEscape(tunnel.Version) + "\" \"plug manual\"\n")
	b.WriteString(".SH NAME\nplug \\- run a local process as a member of a Kubernetes or Docker Swarm cluster\n")
	b.WriteString(".SH SYNOPSIS\n")
	roffVerbatim(&b, overview(commands))
	b.WriteString(".SH COMMANDS\n")
	for _, c := range commands {
		b.WriteString(".SS plug " + c.name + "\n")
		roffVerbatim(&b, c.usage)
	}
	b.WriteString(".SH TOPICS\n")
	for _, t := range topics {
		text, _ := topicText(t.name)
		b.WriteString(".SS " + t.name + "\n")
		roffVerbatim(&b, text)
	}
	return b.String()
}

// roffVerbatim writes text as a block that roff shows as it is: no
// filling, no adjusting, each line kept.
func roffVerbatim(b *strings.Builder, text string) {
	b.WriteString(".nf\n")
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if line == "" {
			b.WriteString(".sp\n")
			continue
		}
		b.WriteString("\\&" + roffEscape(line) + "\n")
	}
	b.WriteString(".fi\n")
}

// roffEscape makes s print as it is in roff: a backslash is roff's escape
// character, "-" is a hyphen unless escaped as a minus, and roff reads
// ASCII: any other character is named by its code point.
func roffEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\e`)
		case r == '-':
			b.WriteString(`\-`)
		case r > 0x7e:
			fmt.Fprintf(&b, `\[u%04X]`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
