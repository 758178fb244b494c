package tunnel

import (
	"context"
	"fmt"
	"net"
	"time"
)

// Platform is the cluster an agent runs in, reduced to what the tunnel needs
// from it. k8sapi and swarmapi implement it; tunnel/tunneltest has an
// in-memory one for tests of the tunnel itself.
//
// Every change a Platform makes to a cluster object carries a receipt that
// Release, or Maintain's sweep in any agent, undoes.
type Platform interface {
	// Serve makes b.Name:b.Port inside the cluster reach this agent on
	// b.Target. A name nothing answers to yet is created; a deployed
	// service of that name is parked (taken over) with a receipt.
	// If another run holds the name, Serve changes nothing and returns a
	// *HeldError. Bad names and ports are refused before anything changes.
	Serve(ctx context.Context, b Binding) (Served, error)

	// Release gives b.Name back: it deletes what Serve created or restores
	// the parked service exactly from its receipt. Releasing a name that is
	// not held, or releasing twice, is not an error.
	Release(ctx context.Context, b Binding) error

	// DialContext connects to address ("name:port") as a workload in the
	// cluster would: cluster DNS, Services and network policy apply.
	DialContext(ctx context.Context, network, address string) (net.Conn, error)

	// Maintain runs the platform's background duties until ctx ends: renewing
	// the heartbeat of the receipts this agent holds, and sweeping receipts
	// whose holder is gone (at once, then about once a minute).
	Maintain(ctx context.Context) error

	// Rights reports every permission the agent's features need and whether
	// the agent has it. The agent refuses to start when a Required right is
	// missing.
	Rights(ctx context.Context) ([]Right, error)

	// WatchNames calls update with the complete set of names the cluster's
	// workloads reach from the agent, at once and again whenever the set
	// changes, until ctx ends: that is what runs consume. Calls of update
	// never overlap, and update must not block for long. WatchNames
	// returns ctx.Err() when ctx ends, or an error that retrying cannot fix
	// (the agent may not list services).
	WatchNames(ctx context.Context, update func([]ClusterName)) error
}

// ClusterName is a name the cluster's workloads reach, with its TCP ports.
type ClusterName struct {
	// Name is the shortest form workloads use, e.g. "web": the agent dials
	// it, with a port, for the runs that consume it.
	Name string
	// Aliases are the other forms of the same name, e.g. "web.ns",
	// "web.ns.svc", "web.ns.svc.cluster.local".
	Aliases []string
	// Ports are its TCP ports, ascending, each once.
	Ports []int
}

// Holder identifies the run that holds a name.
type Holder struct {
	Run       string    // run id chosen by the CLI, stable across reconnects
	Agent     string    // the agent instance holding the session (pod name, task id)
	Developer string    // fingerprint of the developer's key, "SHA256:..."
	User      string    // the SSH user name the developer connected as
	Since     time.Time // when the run first served the name
}

func (h Holder) String() string {
	return fmt.Sprintf("run %s of %s (%s) via agent %s since %s",
		h.Run, h.User, h.Developer, h.Agent, h.Since.UTC().Format(time.RFC3339))
}

// Binding asks for Name:Port inside the cluster to reach this agent's
// local TCP port Target.
type Binding struct {
	Name   string // a DNS-1035 label
	Port   int    // the port callers in the cluster use
	Target int    // the agent's listening port that accepts those connections
	Holder Holder

	// Notify, when set, receives what the platform learns about the name
	// while it is served (the path broke, the path healed, a controller
	// reverted the takeover). It must not block.
	Notify func(Event)
}

// Served says what Serve did.
type Served struct {
	TookOver bool   // a deployed service was parked for the session
	Detail   string // one line for the developer's terminal
}

// Event is something a run's developer is told about one of its names.
type Event struct {
	Name string // the served name it concerns, if any
	Kind EventKind
	Text string
}

// EventKind classifies an Event for the terminal.
type EventKind string

const (
	EventInfo    EventKind = "info"
	EventWarning EventKind = "warning"
	EventHealed  EventKind = "healed"
	EventEnded   EventKind = "ended"
	EventRefused EventKind = "refused" // the agent refused to serve the name; Text says why
)

// Right is one permission a feature of the agent needs.
type Right struct {
	Rule     string // e.g. "patch services"
	Feature  string // what needs it, e.g. "-s: take over a deployed Service"
	Required bool   // the agent refuses to start without it
	Granted  bool
	Fix      string // one command that grants this right alone, if known
}

// HeldError is returned by Serve when another run holds the name.
type HeldError struct {
	Name   string
	Holder Holder
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("%s is already served by %s; wait for that run to end, or choose another name", e.Name, e.Holder)
}

// RefusedError is a request a Platform refuses before it changes anything:
// a bad name or port, or a service plug cannot serve. Text says why and
// what to do instead.
type RefusedError struct {
	Name string
	Text string
}

func (e *RefusedError) Error() string { return e.Text }

// Refused returns a *RefusedError about name.
func Refused(name, format string, args ...any) error {
	return &RefusedError{Name: name, Text: fmt.Sprintf(format, args...)}
}

// CheckBinding refuses, with a *RefusedError, a binding no platform can
// serve: a name that is not a DNS-1035 label, a port out of range, or no
// run holding it. Platforms call it before they change anything.
func CheckBinding(b Binding) error {
	if err := CheckName(b.Name); err != nil {
		return &RefusedError{Name: b.Name, Text: err.Error()}
	}
	if err := CheckPort(b.Port); err != nil {
		return Refused(b.Name, "%s: the cluster %v (e.g. -s %s:8080:3000)", b.Name, err, b.Name)
	}
	if err := CheckPort(b.Target); err != nil {
		return Refused(b.Name, "%s: the agent's %v", b.Name, err)
	}
	if b.Holder.Run == "" {
		return Refused(b.Name, "%s: the run holding it has no id", b.Name)
	}
	return nil
}
