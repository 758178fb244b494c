package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"plug/tunnel/localnames"
)

// setupUsage is the usage of plug setup.
const setupUsage = `Usage: plug setup [--user ACCOUNT] [--undo]

Prepares this machine once so that later plug runs need no privilege: the
programs a run starts reach the cluster's names on the Services' own ports,
80 and 443 included. It needs root (sudo) on Linux and macOS, where the
installer runs it from a terminal (it asks for your password once), and an
administrator on Windows, where the installer only prints it: run it from a
Git Bash started as an administrator. Each change is said as it is made,
and running it again changes nothing.

  --user ACCOUNT  (macOS, Windows) the account that may write the hosts file:
                  the one that runs plug, when it is not the one setup runs as
                  (default: the account that ran sudo on macOS; USERNAME, the
                  account of the elevated Git Bash, on Windows)
  --undo          removes exactly what plug setup added, and nothing else

What it changes:
  Linux    the names live in a private /etc/hosts of each run (a user and mount
           namespace), which needs nothing; setup lets programs of every user
           listen on ports below 1024 (net.ipv4.ip_unprivileged_port_start=0,
           in /etc/sysctl.d/60-plug.conf and at once), as Docker does in every
           container. Where AppArmor restricts unprivileged user namespaces
           (Ubuntu 23.10 and later), it allows them to this plug binary alone
           (/etc/apparmor.d/plug).
  macOS    adds the loopback addresses 127.77.0.1-127.77.0.254 to lo0 at every
           boot (/Library/LaunchDaemons/dev.plug.loopback.plist), and lets you
           write /etc/hosts (an ACL entry on the file alone), where runs keep
           their names in a block of their own.
  Windows  lets you write the hosts file (an ACL entry on the file alone),
           where runs keep their names in a block of their own.

Examples:
  sudo plug setup
  sudo plug setup --undo
  plug setup --user alice          # Windows, Git Bash as an administrator
`

// runSetup is plug setup.
func runSetup(c *cli, args []string) error {
	fs := flags("setup")
	undo := fs.Bool("undo", false, "")
	account := fs.String("user", "", "")
	if err := c.parseFlags("setup", fs, args); err != nil {
		return err
	}
	steps, err := machineSteps(*account)
	if err != nil {
		return err
	}
	if !isAdmin() {
		return errors.New("plug setup changes this machine and needs " + adminNeeded + ": " + localnames.SetupHow)
	}
	say := func(line string) { fmt.Fprintln(c.stdout, "plug setup: "+line) }
	if *undo {
		return runSteps(steps, say, setupStep.undo)
	}
	return runSteps(steps, say, setupStep.apply)
}

// setupStep is one change plug setup makes to the machine.
type setupStep interface {
	// apply makes the change, or says it is there already.
	apply() (string, error)
	// undo removes the change if setup made it, and nothing else.
	undo() (string, error)
}

// runSteps does one of each step, saying what it did; it goes on after a
// step that failed, and returns the failures.
func runSteps(steps []setupStep, say func(string), do func(setupStep) (string, error)) error {
	var failed []error
	for _, s := range steps {
		done, err := do(s)
		if done != "" {
			say(done)
		}
		if err != nil {
			failed = append(failed, err)
		}
	}
	return errors.Join(failed...)
}

// setupMarker is in every file plug setup writes: undo removes only files
// that carry it.
const setupMarker = "Written by plug setup; plug setup --undo removes it."

// ours reports whether path is a file plug setup wrote.
func ours(path string) bool {
	_, ok := ourText(path)
	return ok
}

// ourText is the text of path, when plug setup wrote it (ours).
func ourText(path string) (string, bool) {
	b, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(b), setupMarker) {
		return "", false
	}
	return string(b), true
}

// readValue reads a one-line value, such as a sysctl's.
func readValue(path string) (string, error) {
	b, err := os.ReadFile(path)
	return strings.TrimSpace(string(b)), err
}

// runProgram runs argv; when it fails, the error says what could not be
// done (cannot WHAT), why, and what the program printed.
func runProgram(what string, argv ...string) error {
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("cannot %s: %v: %s", what, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// executable is plug's own binary, its links resolved.
func executable() (string, error) {
	p, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(p)
}
