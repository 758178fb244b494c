package ui

import "fmt"

// install is the command that installs plug from the agent on one
// system, with the agent's address and host key filled in.
type install struct {
	System  string `json:"system"`
	Command string `json:"command"`
}

// installs are the install commands of macOS, Linux and Windows (Git
// Bash) for info's agent: the installer checks the agent's host key
// against the fingerprint before it installs anything.
func installs(info Info) []install {
	get := fmt.Sprintf("ssh -p %d -o UserKnownHostsFile=/dev/null get@%s", info.Port, info.Host)
	args := fmt.Sprintf("--fingerprint %s %s %d", info.HostKey, info.Host, info.Port)
	unix := get + " install | sh -s -- " + args
	return []install{
		{System: "macOS", Command: unix},
		{System: "Linux", Command: unix},
		{System: "Windows (Git Bash)", Command: get + " install-windows | bash -s -- " + args},
	}
}
