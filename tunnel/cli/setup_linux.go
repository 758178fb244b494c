package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"plug/tunnel/localnames"
)

// machineSteps are the changes plug setup makes on Linux, which grant no
// account anything: account must be empty.
func machineSteps(account string) ([]setupStep, error) {
	if account != "" {
		return nil, errors.New("--user names the account that may write the hosts file on macOS and Windows; plug setup on Linux grants no account anything: run it without --user")
	}
	return []setupStep{
		lowPorts{conf: "/etc/sysctl.d/60-plug.conf", sysctl: "/proc/sys/net/ipv4/ip_unprivileged_port_start"},
		userNamespaces{profile: "/etc/apparmor.d/plug", restricted: "/proc/sys/kernel/apparmor_restrict_unprivileged_userns"},
	}, nil
}

// lowPorts lets programs of every user listen on ports below 1024: the
// value 0 of net.ipv4.ip_unprivileged_port_start, kept in a sysctl.d file
// for the next boots (which also records the value it replaced) and set at
// once.
//
// Why not a file capability on the plug binary (setcap
// cap_net_bind_service)? A run starts CMD through plug itself in a new user
// namespace, and a binary with file capabilities can do neither: the
// kernel clears the ambient capability the helper needs at its execve, and
// makes the process non-dumpable, so plug may not write its child's user
// namespace mappings. The capability would also be lost at each update of
// the binary. The sysctl is what Docker sets in every container, and what
// rootless Docker and Podman document for the same need; its cost is that
// any local program may take a port below 1024 that is free.
type lowPorts struct {
	conf   string // the sysctl.d file
	sysctl string // the value's file under /proc/sys
}

const previousPrefix = "# plug: previous net.ipv4.ip_unprivileged_port_start = "

func (l lowPorts) apply() (string, error) {
	current, err := readValue(l.sysctl)
	if err != nil {
		return "", err
	}
	if ours(l.conf) {
		if current != "0" {
			if err := os.WriteFile(l.sysctl, []byte("0\n"), 0o644); err != nil {
				return "", err
			}
		}
		return "ports below 1024 are open to every user's programs already (" + l.conf + ")", nil
	}
	if current == "0" {
		return "ports below 1024 are open to every user's programs already (net.ipv4.ip_unprivileged_port_start=0); nothing to change", nil
	}
	text := "# " + setupMarker + "\n" +
		"# It lets programs of every user listen on ports below 1024, so that plug runs\n" +
		"# answer cluster names on their Services' ports (80, 443...) without root.\n" +
		previousPrefix + current + "\n" +
		"net.ipv4.ip_unprivileged_port_start = 0\n"
	if err := os.WriteFile(l.conf, []byte(text), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(l.sysctl, []byte("0\n"), 0o644); err != nil {
		os.Remove(l.conf)
		return "", fmt.Errorf("cannot set net.ipv4.ip_unprivileged_port_start: %w", err)
	}
	return fmt.Sprintf("programs may listen on ports below 1024: net.ipv4.ip_unprivileged_port_start is 0 (was %s), kept in %s", current, l.conf), nil
}

func (l lowPorts) undo() (string, error) {
	text, ok := ourText(l.conf)
	if !ok {
		return "", nil
	}
	var previous string
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, previousPrefix); ok {
			previous = strings.TrimSpace(v)
		}
	}
	said := "removed " + l.conf
	current, err := readValue(l.sysctl)
	switch {
	case err != nil:
		return "", err
	case previous == "":
		said += "; it did not record the value it replaced, so net.ipv4.ip_unprivileged_port_start stays " + current
	case current == "0":
		if err := os.WriteFile(l.sysctl, []byte(previous+"\n"), 0o644); err != nil {
			return "", err
		}
		said += "; net.ipv4.ip_unprivileged_port_start is " + previous + " again"
	default:
		said += "; net.ipv4.ip_unprivileged_port_start was changed since (" + current + "), and is left so"
	}
	if err := os.Remove(l.conf); err != nil {
		return "", err
	}
	return said, nil
}

// userNamespaces makes sure a run may create the user namespace its
// private /etc/hosts lives in. Where AppArmor restricts unprivileged user
// namespaces (Ubuntu 23.10 and later), it allows them to this plug binary
// alone, with a profile that confines nothing else. Where user namespaces
// are off altogether, it says how to turn them on, and does not.
type userNamespaces struct {
	profile    string // the AppArmor profile it writes
	restricted string // AppArmor's restriction switch under /proc/sys
}

func (u userNamespaces) apply() (string, error) {
	if advice := localnames.UserNamespaceAdvice(); advice != "" && !strings.Contains(advice, "AppArmor") {
		return "", errors.New("runs cannot make a private /etc/hosts" + advice)
	}
	if v, _ := readValue(u.restricted); v != "1" {
		return "unprivileged user namespaces are available: nothing to change", nil
	}
	bin, err := executable()
	if err != nil {
		return "", err
	}
	text := "# " + setupMarker + "\n" +
		"# It lets " + bin + " create user namespaces under AppArmor's restriction,\n" +
		"# for the private /etc/hosts of the programs a plug run starts; it confines nothing.\n" +
		"abi <abi/4.0>,\ninclude <tunables/global>\n\n" +
		"profile plug " + bin + " flags=(unconfined) {\n  userns,\n}\n"
	if err := os.WriteFile(u.profile, []byte(text), 0o644); err != nil {
		return "", err
	}
	if err := runProgram("load the AppArmor profile "+u.profile, "apparmor_parser", "-r", u.profile); err != nil {
		os.Remove(u.profile)
		return "", err
	}
	return "AppArmor lets " + bin + " create user namespaces (" + u.profile + ")", nil
}

func (u userNamespaces) undo() (string, error) {
	if !ours(u.profile) {
		return "", nil
	}
	if _, err := exec.LookPath("apparmor_parser"); err == nil {
		if err := runProgram("unload the AppArmor profile "+u.profile, "apparmor_parser", "-R", u.profile); err != nil {
			return "", err
		}
	}
	if err := os.Remove(u.profile); err != nil {
		return "", err
	}
	return "removed the AppArmor profile " + u.profile, nil
}
