// Package cli is the plug command: the developer's runs, profiles and
// keys, and the agent. main.go calls Main.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// Exit codes of plug. A run exits with its command's own code; these are
// plug's own outcomes.
const (
	ExitFailed  = 1 // the command was refused or failed; nothing was changed
	ExitUsage   = 2 // bad usage: nothing was contacted, nothing was changed
	ExitConnect = 3 // a run could not connect to an agent or serve a name; CMD was not started
	ExitEnded   = 4 // the agent ended the run, or its connection was lost for good; CMD was stopped
	ExitNoExec  = 126
	ExitNoCmd   = 127
)

// command is one subcommand of plug.
type command struct {
	name     string
	synopsis string // one line for the overview
	usage    string // the full usage, shown by `plug help NAME` and -h
	run      func(c *cli, args []string) error
}

// commands is plug's command table and the index of the CLI, in the order
// the overview (plug help) lists them: each command's name and its line in
// the overview; its usage (plug help NAME, or NAME -h) and its code are in
// the command's own file. The first, "run", is a run (plug -p PROFILE ...
// CMD), which the overview shows apart. The commands reach the table
// through their cli (cli.commands), which keeps their own code from
// depending on it.
var commands = []*command{
	{name: "run", synopsis: "run CMD as a member of each PROFILE's cluster", usage: runUsage, run: runRun},
	{name: "agent", synopsis: "run the agent inside a cluster (the image's entrypoint)", usage: agentUsage, run: runAgent},
	{name: "keygen", synopsis: "generate the key pair of a profile", usage: keygenUsage, run: runKeygen},
	{name: "pubkey", synopsis: "print the public key of a profile, to deposit it", usage: pubkeyUsage, run: runPubkey},
	{name: "ls", synopsis: "list the profiles and their keys", usage: lsUsage, run: runLs},
	{name: "rn", synopsis: "rename a profile with its key pair", usage: rnUsage, run: runRn},
	{name: "profile", synopsis: "add a profile by hand (the installer does it for you)", usage: profileUsage, run: runProfile},
	{name: "doctor", synopsis: "check a profile, its agent and the agent's rights", usage: doctorUsage, run: runDoctor},
	{name: "who", synopsis: "list who is plugged into a profile's cluster", usage: whoUsage, run: runWho},
	{name: "end", synopsis: "end a run plugged into a profile's cluster, saying why", usage: endUsage, run: runEnd},
	{name: "ui", synopsis: "a page in the browser: who is plugged in, people, the audit trail", usage: uiUsage, run: runUI},
	{name: "members", synopsis: "list, accept, refuse and remove the keys let in (admission by approval); deny keys", usage: membersUsage, run: runMembers},
	{name: "setup", synopsis: "prepare this machine once, so that runs need no privilege (as root; on Windows as an administrator)", usage: setupUsage, run: runSetup},
	{name: "smb", synopsis: "serve a directory over SMB (the volume helper's engine)", usage: smbUsage, run: runSmb},
	{name: "update", synopsis: "bring this plug to the version of a profile's agent, or move the agent to an image", usage: updateUsage, run: runUpdate},
	{name: "version", synopsis: "print plug's version", usage: versionUsage, run: runVersion},
	{name: "completion", synopsis: "print a shell's completion script for plug", usage: completionUsage, run: runCompletion},
	{name: "help", synopsis: "show plug's usage, a command's, or a topic; --man: a man page", usage: helpUsage, run: runHelp},
}

// cli carries the standard streams, so tests can capture them, and the
// command table.
type cli struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	commands       []*command
	// ownProcess: the command runs as plug's process (Main), whose runtime
	// it may tune (tuneRuntime), not in a test's
	ownProcess bool
}

// newCLI returns the plug command on these streams.
func newCLI(stdin io.Reader, stdout, stderr io.Writer) *cli {
	return &cli{stdin: stdin, stdout: stdout, stderr: stderr, commands: commands}
}

// Main runs plug with args (os.Args[1:]) and returns the exit code.
func Main(args []string) int {
	c := newCLI(os.Stdin, os.Stdout, os.Stderr)
	c.ownProcess = true
	return c.main(args)
}

// lookup returns the command called name, or nil.
func (c *cli) lookup(name string) *command {
	for _, cmd := range c.commands {
		if cmd.name == name {
			return cmd
		}
	}
	return nil
}

func (c *cli) main(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(c.stderr, overview(c.commands))
		return ExitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help":
		fmt.Fprint(c.stdout, overview(c.commands))
		return 0
	}
	if strings.HasPrefix(args[0], "-") && args[0] != "--version" {
		return c.exit(runRun(c, args))
	}
	name := strings.TrimPrefix(args[0], "--")
	cmd := c.lookup(name)
	if cmd == nil || cmd.name == "run" {
		return c.exit(usageError("", "there is no command %q; to run a program, give -s or -c first: plug -p PROFILE -c -- %s", args[0], args[0]))
	}
	return c.exit(cmd.run(c, args[1:]))
}

// exit reports err on stderr and returns the exit code it stands for.
func (c *cli) exit(err error) int {
	if err == nil {
		return 0
	}
	var code *exitCode
	if errors.As(err, &code) && code.err == nil {
		return code.code
	}
	fmt.Fprintf(c.stderr, "plug: %v\n", err)
	if errors.As(err, &code) {
		return code.code
	}
	return ExitFailed
}

// exitCode carries the exit code of an error; with a nil err it is a
// plain exit with nothing more to say.
type exitCode struct {
	code int
	err  error
}

func (e *exitCode) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}
func (e *exitCode) Unwrap() error { return e.err }

// usageError is bad usage of cmd: exit 2, with where to read the usage.
func usageError(cmd string, format string, a ...any) error {
	msg := fmt.Sprintf(format, a...)
	help := "plug help"
	if cmd != "" {
		help += " " + cmd
	}
	return &exitCode{ExitUsage, fmt.Errorf("%s\n(see %s)", msg, help)}
}

// flags returns a FlagSet for cmd that reports nothing itself.
func flags(cmd string) *flag.FlagSet {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parse parses args for cmd and returns the positional arguments. With
// interspersed, flags and positional arguments come in any order;
// without, the first positional argument ends the flags. "--" always ends
// them. -h and --help print cmd's usage to stdout and return a plain exit 0.
func (c *cli) parse(cmd string, fs *flag.FlagSet, args []string, interspersed bool) ([]string, error) {
	var positional []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(c.stdout, c.lookup(cmd).usage)
			return nil, &exitCode{code: 0}
		}
		if err != nil {
			return nil, usageError(cmd, "%s: %v", cmd, err)
		}
		rest := fs.Args()
		if n := len(args) - len(rest); !interspersed || len(rest) == 0 || n > 0 && args[n-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// parseFlags is parse for a command that takes flags only: an argument is
// a usage error.
func (c *cli) parseFlags(cmd string, fs *flag.FlagSet, args []string) error {
	pos, err := c.parse(cmd, fs, args, true)
	if err == nil && len(pos) > 0 {
		err = usageError(cmd, "%s takes no arguments, got %q", cmd, pos[0])
	}
	return err
}

// multiFlag collects every value of a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
