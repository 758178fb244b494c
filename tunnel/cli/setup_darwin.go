package cli

import (
	"fmt"
	"os"
	"os/exec"
	"strings"

	"plug/tunnel/localnames"
)

// machineSteps are the changes plug setup makes on macOS. The account
// that may write /etc/hosts is account, else the one that ran sudo.
func machineSteps(account string) ([]setupStep, error) {
	access := hostsAccess{user: account, principal: account, named: account != "", state: "/Library/Application Support/plug/hosts-writer"}
	if account == "" {
		access.user, access.principal = os.Getenv("SUDO_USER"), os.Getenv("SUDO_USER")
	} else if strings.Trim(account, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "" || account[0] == '-' {
		return nil, fmt.Errorf("--user %q is not an account name (letters, digits, '.', '_' and '-'): name the account that runs plug", account)
	}
	return []setupStep{
		loopbackAliases{plist: "/Library/LaunchDaemons/" + aliasesLabel + ".plist"},
		access,
	}, nil
}

// grantWrite and revokeWrite are the commands that add and remove the
// developer's ACL entry on /etc/hosts: the right to write its content,
// which is all a run needs (hostsfile.go).
func grantWrite(principal string) []string {
	return []string{"/bin/chmod", "+a", "user:" + principal + " allow write", localnames.HostsPath}
}

func revokeWrite(principal string) []string {
	return []string{"/bin/chmod", "-a", "user:" + principal + " allow write", localnames.HostsPath}
}

// aliasesLabel is the launchd job that adds the loopback aliases at boot.
const aliasesLabel = "dev.plug.loopback"

// loopbackAliases adds 127.77.0.1-127.77.0.254 to lo0, now and at every
// boot, with a launchd job: macOS answers only 127.0.0.1 on lo0 by itself.
type loopbackAliases struct {
	plist string
}

// aliasLoop runs ifconfig for every address of the pool; verb is "alias"
// or "-alias".
func aliasLoop(verb string) string {
	return fmt.Sprintf("i=1; while [ $i -le 254 ]; do /sbin/ifconfig lo0 %s 127.77.0.$i; i=$((i+1)); done", verb)
}

func (l loopbackAliases) apply() (string, error) {
	if ours(l.plist) {
		return "the loopback addresses 127.77.0.1-127.77.0.254 are added at every boot already (" + l.plist + ")", nil
	}
	text := `<?xml version="1.0" encoding="UTF-8"?>
<!-- ` + setupMarker + ` -->
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
	<key>Label</key>
	<string>` + aliasesLabel + `</string>
	<key>ProgramArguments</key>
	<array>
		<string>/bin/sh</string>
		<string>-c</string>
		<string>` + aliasLoop("alias") + `</string>
	</array>
	<key>RunAtLoad</key>
	<true/>
</dict>
</plist>
`
	if err := os.WriteFile(l.plist, []byte(text), 0o644); err != nil {
		return "", err
	}
	if err := runProgram("start the launchd job "+aliasesLabel, "/bin/launchctl", "bootstrap", "system", l.plist); err != nil {
		os.Remove(l.plist)
		return "", err
	}
	return "lo0 answers 127.77.0.1-127.77.0.254, now and at every boot (" + l.plist + ")", nil
}

func (l loopbackAliases) undo() (string, error) {
	if !ours(l.plist) {
		return "", nil
	}
	exec.Command("/bin/launchctl", "bootout", "system/"+aliasesLabel).Run() // not loaded is fine
	if err := runProgram("remove the loopback aliases", "/bin/sh", "-c", aliasLoop("-alias")); err != nil {
		return "", err
	}
	if err := os.Remove(l.plist); err != nil {
		return "", err
	}
	return "removed the loopback addresses 127.77.0.1-127.77.0.254 and " + l.plist, nil
}
