//go:build darwin || windows

package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"plug/tunnel/localnames"
)

// hostsAccess lets the developer's account write the machine's hosts file,
// where runs keep their names (names_hostsfile.go): one access-control
// entry for that account, recorded in a file so that undo removes that
// entry and no other. A run writes the file in place and needs no right on
// its directory (hostsfile.go), so none is given.
type hostsAccess struct {
	user      string // the developer's account, as named
	principal string // the account as the grant names it
	named     bool   // the account was named with --user
	state     string // where the grant is recorded
}

func (h hostsAccess) apply() (string, error) {
	if text, ok := ourText(h.state); ok {
		if granted := recordedPrincipal(text); h.named && granted != h.principal {
			return "", fmt.Errorf("another account (%s) may write %s already (recorded in %s): run plug setup --undo first, then plug setup --user %s", granted, localnames.HostsPath, h.state, h.user)
		}
		return "you may write " + localnames.HostsPath + " already", nil
	}
	if h.user == "" || h.user == "root" {
		return "", errors.New("plug setup does not know whom to let write " + localnames.HostsPath + ": name the account that runs plug with --user ACCOUNT")
	}
	if err := runProgram(fmt.Sprintf("let %s write %s", h.user, localnames.HostsPath), grantWrite(h.principal)...); err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(h.state), 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(h.state, []byte("# "+setupMarker+"\n# "+h.user+"\n"+h.principal+"\n"), 0o644); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s may write %s (recorded in %s); if plug runs as another account, run plug setup --undo, then plug setup --user ACCOUNT", h.user, localnames.HostsPath, h.state), nil
}

func (h hostsAccess) undo() (string, error) {
	text, ok := ourText(h.state)
	if !ok {
		return "", nil
	}
	principal := recordedPrincipal(text)
	if err := runProgram(fmt.Sprintf("take back %s's right to write %s", principal, localnames.HostsPath), revokeWrite(principal)...); err != nil {
		return "", err
	}
	if err := os.Remove(h.state); err != nil {
		return "", err
	}
	os.Remove(filepath.Dir(h.state)) // only if empty
	return "took back " + principal + "'s right to write " + localnames.HostsPath, nil
}

// recordedPrincipal is the account a grant's record names: its last line.
func recordedPrincipal(record string) string {
	lines := strings.Split(strings.TrimSpace(record), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
