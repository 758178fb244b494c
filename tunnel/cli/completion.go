package cli

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// completionUsage is the usage of plug completion.
const completionUsage = `Usage: plug completion bash|zsh|fish|powershell

Prints a script that completes plug's commands, their flags, the topics of
plug help and the profiles of -p (read from ~/.plug/profiles, or
$PLUG_HOME/profiles, as you type) in that shell. Load it from the shell's
start-up file; the script is made from this plug, so load it again after
plug update.

Examples:
  echo 'source <(plug completion bash)' >>~/.bashrc
  echo 'source <(plug completion zsh)' >>~/.zshrc
  plug completion fish >~/.config/fish/completions/plug.fish
  plug completion powershell >>$PROFILE       # PowerShell
`

// runCompletion is plug completion.
func runCompletion(c *cli, args []string) error {
	fs := flags("completion")
	pos, err := c.parse("completion", fs, args, true)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError("completion", "completion: name one shell: bash, zsh, fish or powershell")
	}
	words := completionWords(c.commands)
	switch pos[0] {
	case "bash":
		fmt.Fprint(c.stdout, bashCompletion(words))
	case "zsh":
		fmt.Fprint(c.stdout, "# zsh completion for plug: source <(plug completion zsh)\n"+
			"autoload -U +X compinit && compinit\nautoload -U +X bashcompinit && bashcompinit\n"+
			bashCompletion(words))
	case "fish":
		fmt.Fprint(c.stdout, fishCompletion(words))
	case "powershell":
		fmt.Fprint(c.stdout, powershellCompletion(words))
	default:
		return usageError("completion", "completion: plug completes in bash, zsh, fish or powershell, not %q", pos[0])
	}
	return nil
}

// completions is what the scripts complete: plug's commands (a run's
// flags under ""), each one's flags, and the topics of plug help.
type completions struct {
	commands []*command
	flags    map[string][]string // by command name; "" for a run
	topics   []string
}

// flagInUsage finds a flag where a usage names one: in its Usage lines
// ("[-p PROFILE]", "--force") and at the start of its option lines
// ("  -v, --volume ...").
var flagInUsage = regexp.MustCompile(`(?:^|[\s\[|(])(--?[a-z][a-z-]*)`)

// usageFlags returns the flags usage names, sorted.
func usageFlags(usage string) []string {
	seen := map[string]bool{}
	head, body, _ := strings.Cut(usage, "\n\n")
	lines := strings.Split(head, "\n")
	for _, l := range strings.Split(body, "\n") {
		if t := strings.TrimLeft(l, " "); strings.HasPrefix(t, "-") && len(l)-len(t) >= 2 && len(l)-len(t) <= 4 {
			lead, _, _ := strings.Cut(t, "  ")
			lines = append(lines, lead)
		}
	}
	for _, l := range lines {
		for _, m := range flagInUsage.FindAllStringSubmatch(l, -1) {
			if m[1] != "--" {
				seen[m[1]] = true
			}
		}
	}
	var out []string
	for f := range seen {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

func completionWords(commands []*command) completions {
	w := completions{flags: map[string][]string{}}
	for _, c := range commands {
		name := c.name
		if name == "run" {
			name = ""
		} else {
			w.commands = append(w.commands, c)
		}
		w.flags[name] = append(usageFlags(c.usage), "--help")
	}
	for _, t := range topics {
		w.topics = append(w.topics, t.name)
	}
	return w
}

func (w completions) names() []string {
	var n []string
	for _, c := range w.commands {
		n = append(n, c.name)
	}
	return n
}

// shells are the shells plug completion writes for.
var shells = []string{"bash", "zsh", "fish", "powershell"}

// after returns the words that follow the command called name: for help
// the commands, the topics and --man, for completion the shells, else the
// command's flags.
func (w completions) after(name string) []string {
	switch name {
	case "help":
		return append(append(w.names(), w.topics...), "--man")
	case "completion":
		return shells
	}
	return w.flags[name]
}

// bashCompletion is the bash script: the first word is a command, or a
// run's flag; -p completes profiles; after a run's CMD, bash's own.
func bashCompletion(w completions) string {
	var b strings.Builder
	b.WriteString(`# bash completion for plug: source <(plug completion bash)
_plug_profiles() {
	local d=${PLUG_HOME:-$HOME/.plug}/profiles
	[ -d "$d" ] && (cd "$d" && ls)
}
_plug() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cmd=${COMP_WORDS[1]} words
	if [ "$prev" = -p ]; then
		COMPREPLY=($(compgen -W "$(_plug_profiles)" -- "$cur"))
		return
	fi
	if [ "$COMP_CWORD" -eq 1 ] && [ "${cur#-}" = "$cur" ]; then
		words=` + shellWords(w.names()) + `
	else
		case $cmd in
`)
	for _, c := range w.commands {
		fmt.Fprintf(&b, "\t\t%s) words=%s ;;\n", c.name, shellWords(w.after(c.name)))
	}
	fmt.Fprintf(&b, "\t\t*) [ \"${cur#-}\" != \"$cur\" ] || return; words=%s ;;\n", shellWords(w.flags[""]))
	b.WriteString(`		esac
	fi
	COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -o default -F _plug plug
`)
	return b.String()
}

// shellWords quotes words as one single-quoted shell word.
func shellWords(words []string) string {
	return "'" + strings.Join(words, " ") + "'"
}

// fishCompletion is the fish script.
func fishCompletion(w completions) string {
	var b strings.Builder
	b.WriteString(`# fish completion for plug: plug completion fish >~/.config/fish/completions/plug.fish
function __plug_profiles
	set -l home $PLUG_HOME
	test -n "$home"; or set home ~/.plug
	test -d $home/profiles; and command ls $home/profiles
end
complete -c plug -s p -x -a '(__plug_profiles)' -d profile
`)
	cond := "__fish_use_subcommand"
	for _, c := range w.commands {
		fmt.Fprintf(&b, "complete -c plug -f -n %s -a %s -d %s\n", cond, c.name, fishQuote(c.synopsis))
	}
	for _, c := range w.commands {
		seen := fmt.Sprintf("'__fish_seen_subcommand_from %s'", c.name)
		for _, word := range w.after(c.name) {
			if strings.HasPrefix(word, "-") {
				fmt.Fprintf(&b, "complete -c plug -n %s %s\n", seen, fishFlag(word))
			} else {
				fmt.Fprintf(&b, "complete -c plug -f -n %s -a %s\n", seen, word)
			}
		}
	}
	for _, f := range w.flags[""] {
		fmt.Fprintf(&b, "complete -c plug -n %s %s\n", cond, fishFlag(f))
	}
	return b.String()
}

// fishFlag is the complete option naming flag f: -s for one letter, -o
// for a word with one dash, -l for two.
func fishFlag(f string) string {
	switch name := strings.TrimLeft(f, "-"); {
	case strings.HasPrefix(f, "--"):
		return "-l " + name
	case len(name) == 1:
		return "-s " + name
	default:
		return "-o " + name
	}
}

// fishQuote quotes s for fish, whose single quotes take \' and \\.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// powershellCompletion is the PowerShell script.
func powershellCompletion(w completions) string {
	var b strings.Builder
	b.WriteString(`# PowerShell completion for plug: plug completion powershell >>$PROFILE
Register-ArgumentCompleter -Native -CommandName plug, plug.exe -ScriptBlock {
	param($wordToComplete, $commandAst, $cursorPosition)
	$words = @($commandAst.CommandElements | ForEach-Object { $_.ToString() })
	$first = if ($words.Count -gt 1) { $words[1] } else { '' }
	$candidates = @()
	if ($words.Count -ge 2 -and $words[-1] -eq '-p' -or $words.Count -ge 3 -and $words[-2] -eq '-p' -and $wordToComplete -ne '') {
		$home_ = if ($env:PLUG_HOME) { $env:PLUG_HOME } else { Join-Path $HOME '.plug' }
		$candidates = @(Get-ChildItem -Name (Join-Path $home_ 'profiles') -ErrorAction SilentlyContinue)
	} elseif ($words.Count -le 2 -and $wordToComplete -ne '' -and -not $wordToComplete.StartsWith('-') -or $words.Count -eq 1) {
		$candidates = ` + psList(w.names()) + `
	} else {
		switch ($first) {
`)
	for _, c := range w.commands {
		fmt.Fprintf(&b, "\t\t\t'%s' { $candidates = %s }\n", c.name, psList(w.after(c.name)))
	}
	fmt.Fprintf(&b, "\t\t\tdefault { $candidates = %s }\n", psList(w.flags[""]))
	b.WriteString(`		}
	}
	$candidates | Where-Object { $_ -like "$wordToComplete*" } | ForEach-Object {
		[System.Management.Automation.CompletionResult]::new($_, $_, 'ParameterValue', $_)
	}
}
`)
	return b.String()
}

// psList is words as a PowerShell array of single-quoted strings.
func psList(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", "''") + "'"
	}
	return "@(" + strings.Join(q, ", ") + ")"
}
