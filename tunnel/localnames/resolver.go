// Package localnames makes a cluster's names resolve on this machine for
// the programs a plug run starts: each name gets a loopback address of its
// own (Pool), on which the run listens on the name's ports, and a Resolver,
// per OS, makes the names resolve to those addresses for the run's
// programs: on Linux a private /etc/hosts in a user and mount namespace of
// the command (names_linux.go), where the run may also answer the
// command's DNS itself and open a name only when it is looked up
// (dns_linux.go), on macOS and Windows a block of the run's
// own in the machine's hosts file (names_hostsfile.go, hostsblock.go).
// PlanHosts decides which host names each cluster name answers to.
package localnames

import (
	"net/netip"
	"os/exec"
)

// HelperArg is the first argument with which plug runs itself as the names
// helper of Linux (Helper); it is not a command for people, and is left out
// of plug's help. main.go dispatches it.
const HelperArg = "__plug-names"

// Resolver makes the run's names resolve for the programs it starts.
type Resolver interface {
	// Shared reports whether other runs publish their names where the
	// run does (the machine's hosts file of macOS and Windows): a host
	// name several runs publish is answered by the one that published it
	// first, and each name should also answer as NAME.PROFILE.
	Shared() bool
	// Update makes lines the run's names, replacing those before. Where
	// runs share the hosts file (Shared), a host name
	// of lines that another run published first is answered by that run:
	// the result holds each such name with that run's process id.
	Update(lines []HostLine) (map[string]int, error)
	// Answer makes the run answer the names as the programs it starts
	// look them up, from lookup, before Start: a name then needs an
	// address and listeners only once a program asks for it, and Update
	// gets only those names. It fails, saying why, where the names must
	// all be in place before CMD starts; Update then gets every name.
	Answer(lookup LookupFunc) error
	// Start starts cmd so that it resolves the names.
	Start(cmd *exec.Cmd) error
	// Close removes what the resolver added to this machine, if anything.
	Close() error
}

// LookupFunc answers a host name a program of the run looks up (lowercase,
// without its final dot): the address it reaches it at, once that
// address's listeners are open; false when it is no name of the run's.
type LookupFunc func(host string) (netip.Addr, bool)
