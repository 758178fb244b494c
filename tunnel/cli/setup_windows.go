package cli

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/windows"

	"plug/tunnel/localnames"
)

// isAdmin reports whether plug runs elevated.
func isAdmin() bool { return windows.GetCurrentProcessToken().IsElevated() }

// adminNeeded is what plug setup needs to run as.
const adminNeeded = "to run as an administrator"

// installerHint is how the installer is run here, from Git Bash.
const installerHint = "ssh -n -p PORT get@HOST install-windows | bash -s -- HOST PORT"

// machineSteps are the changes plug setup makes on Windows. The account
// that may write the hosts file is account, else the one setup runs as
// (USERNAME): a standard user who elevates with an administrator's
// account names their own with --user.
func machineSteps(account string) ([]setupStep, error) {
	named := account != ""
	if !named {
		account = os.Getenv("USERNAME")
	}
	sid, _, _, err := windows.LookupSID("", account)
	if err != nil {
		return nil, fmt.Errorf("there is no account %q on this machine or its domain (%v): name the account that runs plug, as NAME or DOMAIN\\NAME, with --user", account, err)
	}
	return []setupStep{
		hostsAccess{user: account, principal: "*" + sid.String(), named: named, state: filepath.Join(os.Getenv("ProgramData"), "plug", "hosts-writer")},
	}, nil
}

// grantWrite and revokeWrite are the commands that add and remove the
// developer's ACL entry (modify) on the hosts file: the rights to read,
// write and lock its content, which are all a run needs (hostsfile.go).
func grantWrite(principal string) []string {
	return []string{"icacls", localnames.HostsPath, "/grant", principal + ":(M)"}
}

func revokeWrite(principal string) []string {
	return []string{"icacls", localnames.HostsPath, "/remove:g", principal}
}
