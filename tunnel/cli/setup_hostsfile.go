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
// entry and no other.
type hostsAccess struct {
	user  string // the developer's account
	state string // where the grant is recorded
}

func (h hostsAccess) apply() (string, error) {
	if ours(h.state) {
		return "you may write " + localnames.HostsPath + " already", nil
	}
	if h.user == "" || h.user == "root" {
		return "", errors.New("run plug setup from your own account (" + localnames.SetupHow + "), so that it knows whom to let write " + localnames.HostsPath)
	}
	if err := runProgram(fmt.Sprintf("let %s write %s", h.user, localnames.HostsPath), grantWrite(h.user)...); err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(h.state), 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(h.state, []byte("# "+setupMarker+"\n"+h.user+"\n"), 0o644); err != nil {
		return "", err
	}
	return h.user + " may write " + localnames.HostsPath + " (recorded in " + h.state + ")", nil
}

func (h hostsAccess) undo() (string, error) {
	text, ok := ourText(h.state)
	if !ok {
		return "", nil
	}
	lines := strings.Split(strings.TrimSpace(text), "\n")
	user := strings.TrimSpace(lines[len(lines)-1])
	if err := runProgram(fmt.Sprintf("take back %s's right to write %s", user, localnames.HostsPath), revokeWrite(user)...); err != nil {
		return "", err
	}
	if err := os.Remove(h.state); err != nil {
		return "", err
	}
	os.Remove(filepath.Dir(h.state)) // only if empty
	return "took back " + user + "'s right to write " + localnames.HostsPath, nil
}
