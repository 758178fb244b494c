package tunnel

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"

	"golang.org/x/crypto/ssh"
)

// Platform is the cluster an agent runs in, reduced to what the tunnel needs
// from it. k8sapi/kubeplatform (a Kubernetes namespace) and
// swarmapi/swarmplatform (a Docker Swarm) implement it, and
// tunnel/memplatform (no cluster: names live in the agent's memory) for
// PLUG_PLATFORM=memory and, with what tests need, tunnel/tunneltest.
//
// Every change a Platform makes to a cluster object carries a receipt that
// Release, or Maintain's sweep in any agent, undoes.
//
// A Platform may also implement the optional interfaces NamedPlatform,
// HostResolver, SharedHostKey, RunStore, DeployedDialer, AddressProtector
// PublicAddresser and AgentUpdater, declared below; the agent finds them by type
// assertion, and does without what a Platform lacks. Each implementation
// asserts the ones it has at compile time
// (var _ tunnel.HostResolver = (*Platform)(nil)).
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
	// cluster would: cluster DNS, Services and network policy apply. It
	// connects with a net.Dialer whose Control is DialControl(ctx), so
	// that the agent's dial policy applies to the address connected to.
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

// NameNoter is a Platform whose names come from places the operator
// offers one by one (kubeplatform: other namespaces, each offered with a
// RoleBinding). NameNotes returns lines for developers about the places
// left out, why, and what the operator does to offer them; it is as
// current as the last names WatchNames gave its update, which it calls
// when the notes change too. The agent puts them in its catalog's Notes,
// which runs and plug doctor show, and in the refusal of a name the
// catalog does not list. ExplainName says, of such a name, the place it
// would be a name of if the operator offered it, and what the operator
// does to offer it; "" when the name is of no such place, or of one the
// notes speak of. It must be quick: the agent asks at each refused dial.
type NameNoter interface {
	Platform
	NameNotes() []string
	ExplainName(host string) string
}

// NamedPlatform is a Platform that names itself: String is what the
// welcome of a run and plug doctor say the agent runs on, e.g.
// "Kubernetes, namespace dev". Without it the agent names the Platform by
// its Go type. kubeplatform, swarmplatform and memplatform implement it.
type NamedPlatform interface {
	Platform
	String() string
}

// HostResolver is a Platform whose names may stand for several addresses
// that callers pick from (DNS round robin, as on Swarm): LookupHost
// returns a name's addresses as the cluster's workloads resolve it, and the
// path proof then probes each of them, so that a workload answering some of
// them is found. Without it the path proof dials the name as it is.
// swarmplatform implements it.
type HostResolver interface {
	Platform
	LookupHost(ctx context.Context, host string) ([]string, error)
}

// SharedHostKey is a Platform that keeps the agent's SSH host key in the
// cluster, so that every replica, and every restart, presents the same
// one: HostKey returns it, making and storing it on first use (or, when
// the cluster will not keep it, a key of this agent alone, saying so in
// the log). RotateHostKey stores a new one and returns the one it
// replaces (nil if none) and the new one; agents present it from their
// next start, which the command RestartHint returns brings about.
// Without it the agent keeps its host key in a file (PLUG_STATE_DIR).
// kubeplatform implements it.
type SharedHostKey interface {
	Platform
	HostKey(ctx context.Context) (ssh.Signer, error)
	RotateHostKey(ctx context.Context) (before, after ssh.PublicKey, err error)
	RestartHint() string
}

// DeployedDialer is a Platform that can reach what answered a name before
// a run took it over: the deployed service it parked. The agent sends
// there each caller the run cannot take — while the run is away (its
// connection dropped, within its grace), while the developer's process
// does not answer (it is starting, restarting or stopping), and while the
// name is being given back — so that callers see no error when the name
// changes hands. Without it, or when DialDeployed fails, such a caller is
// refused at once (a TCP reset).
//
// DialDeployed connects to one of the deployed backends of b.Name:b.Port
// as the parked service's own routing would pick it now (a ready pod its
// parked selector selects, on the port the Service mapped b.Port to). It
// fails at once when b.Name is one the run created (nothing else answers
// it) or nothing deployed is ready. kubeplatform and swarmplatform
// implement it.
type DeployedDialer interface {
	Platform
	DialDeployed(ctx context.Context, b Binding) (net.Conn, error)
}

// DialBackends connects, for a DeployedDialer, to one of the deployed
// backends at targets (host:port): up to 3 of them are tried, in random
// order, each for at most a second. The agent dials them itself, not for
// a run, so no run's dial policy applies. It fails with the errors of
// every try, and at once when targets is empty. It shuffles targets.
func DialBackends(ctx context.Context, targets []string) (net.Conn, error) {
	if len(targets) == 0 {
		return nil, errors.New("no deployed backend is ready")
	}
	rand.Shuffle(len(targets), func(i, j int) { targets[i], targets[j] = targets[j], targets[i] })
	var errs []error
	for _, target := range targets[:min(3, len(targets))] {
		dialCtx, cancel := context.WithTimeout(ctx, time.Second)
		var dialer net.Dialer
		conn, err := dialer.DialContext(dialCtx, "tcp", target)
		cancel()
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// DeployedLister is a DeployedDialer whose deployed backends go on running
// while a personal takeover (Binding.Filter) holds the name (a Kubernetes
// takeover only repoints the Service; a Swarm one stops the parked
// service's tasks, and runs a copy of it for a personal takeover), and
// that lists them:
// DeployedAddrs returns the addresses (host:port) DialDeployed picks from
// now, in no particular order; an error when none is ready, or b.Name is
// one the run created. It must be quick: the agent asks at each request.
// Personal takeovers (Filter) need it: each request that no filter
// matches goes to one of them, picked per request, over connections kept
// open to each between requests. kubeplatform and swarmplatform implement
// it.
type DeployedLister interface {
	DeployedDialer
	DeployedAddrs(b Binding) ([]string, error)
}

// HolderMover is a Platform that can hand what one run holds of a name to
// another run of the same agent, without giving it back in between: the
// personal takeovers of a name share one binding, held by one of them, and
// when that one leaves, the next one holds it (agent_filtered.go).
// MoveHolder makes to.Holder the holder of what from.Holder holds of
// from.Name (every port; to serves the same ones, on the same Target), if
// from.Holder still holds it on this agent; otherwise it changes nothing
// and says why. Without it, the binding stays under the run that made it
// until the last personal takeover of the name ends. kubeplatform
// implements it.
type HolderMover interface {
	Platform
	MoveHolder(ctx context.Context, from, to Binding) error
}

// AddressProtector is a Platform that knows addresses no run may dial
// through the agent, whatever name resolves to them, unless the operator
// lists them one by one (dialpolicy.go): the node's, the API server's, the
// agent's own, plug's own Services'. The agent asks at each dial of a run,
// so ProtectedAddrs must be quick, and safe to call from many goroutines.
// kubeplatform and swarmplatform implement it.
type AddressProtector interface {
	Platform
	ProtectedAddrs() []netip.Addr
}

// CallerAddresser is a Platform that sends the callers of a served name to
// one address of the agent's (Binding.Target is a port there): the pod's
// address on Kubernetes (POD_IP, what the Service's endpoints name), the
// address the relays dial on Swarm. The agent listens for a name's callers
// on that address only, never on every interface; on a Platform that is
// not a CallerAddresser (the memory platform), on the loopback address.
type CallerAddresser interface {
	Platform
	CallerAddr() netip.Addr
}

// PublicAddresser is a Platform that can find the address developers reach
// the agent by, for the installer (ssh get@HOST install | sh), when the
// operator did not give one (Agent.PublicAddr). PublicAddr returns it as
// host:port for the agent listening on port, and how it found it, in words
// that say what it assumes ("service plug_agent publishes port 2222 in
// host mode, and this agent's node advertises 127.0.0.1"). The agent asks
// once, when it starts, and logs both. swarmplatform implements it.
type PublicAddresser interface {
	Platform
	PublicAddr(ctx context.Context, port int) (addr, how string, err error)
}

// EnvResolver is a Platform that can read a workload's environment (plug
// --env-from). Its errors are shown to the developer: they say what is
// wrong and what to do, and never hold a value of the environment.
// kubeplatform and swarmplatform implement it.
type EnvResolver interface {
	Platform
	// Env returns the environment of req's container as that container
	// sees it: every variable, with the value it has there. A variable
	// whose value the agent cannot read (it lacks a right, or only the
	// node knows it) is left out, in LeftOut, never guessed. A workload
	// or container that does not exist, or a request of a kind the
	// platform does not have, is an error and nothing is returned.
	Env(ctx context.Context, req EnvRequest) (*Env, error)
}

// VolumeServer is a Platform that can serve a workload's volume to a run
// over SMB (plug --volume): a helper, made for the run, that mounts the
// same volume source as the workload and writes as the workload's uid.
// The helper carries the run's receipt: ReleaseVolume removes it, and
// Maintain's sweep in any agent removes those whose run or agent is gone.
// kubeplatform (a pod and a Service) and swarmplatform (a service on the
// node of the workload's task) implement it.
type VolumeServer interface {
	Platform
	// ServeVolume makes the helper of req and returns once it runs (the
	// agent then waits until it answers through the name). A volume
	// another pod or container cannot mount (an emptyDir, a tmpfs), a
	// workload or volume that does not exist, or a helper the cluster's
	// admission refuses is an error saying why and what to do, and leaves
	// nothing behind.
	ServeVolume(ctx context.Context, req VolumeRequest) (Volume, error)
	// ReleaseVolume removes the helper id (Volume.ID). Removing one that
	// is gone is not an error.
	ReleaseVolume(ctx context.Context, id string) error
}

// AgentUpdater is a Platform that can move the agent's own workload to
// another image (plug update --agent): kubeplatform, the agent's
// Deployment; swarmplatform, the agent's service. The agent asks it only for a key that oversees it (Keys),
// with an image CheckImage accepted, and audits the request and its
// outcome. It never changes the agent's rights (the Role): the new agent's
// missing rules are for plug doctor to name.
type AgentUpdater interface {
	Platform
	// UpdateAgent sets the image of the agent's container in its workload
	// to req.Image and waits, up to req.Wait, until every replica runs it
	// and is ready. A request it cannot carry out (the agent runs in no
	// workload it may change, the image is the one it runs) is an error
	// and changes nothing. A rollout that fails (the image cannot be
	// pulled, the container crashes, the pods are not ready within
	// req.Wait) is undone: the previous image is set back and waited for,
	// and the AgentRollout says what failed (Failed) and whether the undo
	// failed too (UndoFailed). progress receives a line for the
	// developer at each step; it must not block.
	UpdateAgent(ctx context.Context, req AgentUpdateRequest, progress func(string)) (AgentRollout, error)
}

// AgentUpdateRequest asks an AgentUpdater to move the agent to Image.
type AgentUpdateRequest struct {
	Image string        // a reference CheckImage accepted
	By    string        // who asked: account and key fingerprint, for the workload's annotation
	Wait  time.Duration // how long the new pods may take to be ready
}

// AgentRollout is what an AgentUpdater did.
type AgentRollout struct {
	Workload string   // e.g. "deployment/plug"
	From, To string   // the image before, and the one asked for
	Pods     []string // the pods running To, once rolled out
	// Failed says why the rollout failed and was undone; "" when To runs.
	Failed string
	// UndoFailed says why the previous image could not be set back, and
	// what to do; "" when it was (or nothing needed undoing).
	UndoFailed string
}

// ClusterName is a name the cluster's workloads reach, with its TCP and
// UDP ports.
type ClusterName struct {
	// Name is the shortest form workloads use, e.g. "web": the agent dials
	// it, with a port, for the runs that consume it.
	Name string
	// Aliases are the other forms of the same name, e.g. "web.ns",
	// "web.ns.svc", "web.ns.svc.cluster.local".
	Aliases []string
	// Ports are its TCP ports, ascending, each once.
	Ports []int
	// UDPPorts are its UDP ports, ascending, each once. A run reaches them
	// over datagram channels (udp.go) when its agent carries datagrams.
	UDPPorts []int
	// Protected are the addresses of ProtectedAddrs (AddressProtector)
	// that this name stands for, which a run may reach by this name, on
	// its ports, and by no other name or range: on Kubernetes the
	// ClusterIP of the Service kubernetes of namespace default, the API
	// server's, once default is offered. The agent keeps them; runs are
	// not told them.
	Protected []netip.Addr
	// Unlisted marks one of plug's own objects that runs reach through
	// plug itself (a volume helper's Service): the agent dials it for a
	// run, but runs are not told it as a name.
	Unlisted bool
}

// Holder identifies the run that holds a name, and the key it belongs to.
// A name belongs to its holder's key: two Holders are the same run only
// when both the run id and the key match (SameRun), and every Platform
// checks both before it extends, moves or gives back what a run holds.
// The run id is not a credential: anyone may learn it from the cluster's
// objects, and it proves nothing without the key.
type Holder struct {
	Run       string    // run id chosen by the CLI (128 random bits), stable across reconnects
	Agent     string    // the agent instance holding the session (pod name, task id)
	Developer string    // fingerprint of the developer's key, "SHA256:...": the owner
	User      string    // the SSH user name the developer connected as
	Since     time.Time // when the run first served the name
}

// SameRun reports whether h and o are the same run of the same key.
func (h Holder) SameRun(o Holder) bool {
	return h.Run == o.Run && h.Developer == o.Developer
}

// String names the holder for another developer's terminal: who (user and
// key fingerprint), since when, through which agent. It never says the
// run id.
func (h Holder) String() string {
	s := fmt.Sprintf("%s (key %s) since %s", PeerText(h.User), PeerText(h.Developer), h.Since.UTC().Format(time.RFC3339))
	if h.Agent != "" {
		s += " via agent " + PeerText(h.Agent)
	}
	return s
}

// Binding asks for Name:Port inside the cluster to reach this agent's
// local TCP port Target, or with UDP, Name's UDP port Port to reach the
// agent's UDP port Target.
type Binding struct {
	Name   string // a DNS-1035 label
	Port   int    // the port callers in the cluster use
	Target int    // the agent's listening port that accepts those connections
	// UDP says Port and Target are UDP ports: the callers' datagrams reach
	// Target. A Platform that cannot serve UDP refuses such a binding with
	// a *RefusedError saying so, changing nothing.
	UDP    bool
	Holder Holder
	// NoTakeover says the run may serve Name only if the cluster does not
	// have it: a Platform returns ErrTakeoverNotAllowed, changing
	// nothing, rather than park a deployed service (OpenRules).
	NoTakeover bool
	// Filter is set for a personal takeover (agent_filtered.go): the
	// requests of no run's filter go on to the deployed backends
	// (DeployedLister), which the Platform keeps running for that. It is
	// the first run's filter (Filter.String), for logs; "" for a full
	// takeover or a new name.
	Filter string

	// Notify, when set, receives what the platform learns about the name
	// while it is served (the path broke, the path healed, a controller
	// reverted the takeover). It must not block.
	Notify func(Event)
}

// ErrTakeoverNotAllowed is a Platform's refusal of a Binding with
// NoTakeover whose name is a deployed service.
var ErrTakeoverNotAllowed = errors.New("the name is a deployed service, and the binding does not allow a takeover")

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

	// EventPathChanged is what a Platform sends through Binding.Notify
	// when something that routes the name changed (the Service, its
	// endpoints, the tasks behind the name): the agent proves the path
	// again at once rather than at its next periodic check. The developer
	// is not told of the event itself.
	EventPathChanged EventKind = "path-changed"
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
// run and key holding it. Platforms call it before they change anything.
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
	if b.Holder.Run == "" || b.Holder.Developer == "" {
		return Refused(b.Name, "%s: the run holding it has no id or no key", b.Name)
	}
	return nil
}

// RunStore is a Platform that keeps a record of each run of each agent in
// the cluster, where every agent replica reads them: plug who lists the
// runs of every replica, and plug end reaches the replicas holding a run's
// connections. Without one, an agent knows only its own runs.
//
// Records belong to the agent that wrote them: a platform removes the
// records of an agent that is gone (an owner reference, a heartbeat), so
// that none outlives its agent.
type RunStore interface {
	// PutRun writes rec, the record of run rec.Run on agent rec.Agent (this
	// agent), replacing the one written before.
	PutRun(ctx context.Context, rec RunRecord) error
	// DeleteRun removes this agent's record of run; removing a record that
	// is not there is not an error.
	DeleteRun(ctx context.Context, agent, run string) error
	// Runs returns the records of every live agent.
	Runs(ctx context.Context) ([]RunRecord, error)
	// EndRun marks ended by end.By, for end.Reason, every agent's record
	// of run whose Key is key (the fingerprint of the key that opened the
	// run), and returns how many it marked: a record of the same run id
	// written for another key is left alone, since a run id proves
	// nothing. Each agent holding one learns it from WatchEnded and ends
	// its part of the run.
	EndRun(ctx context.Context, run, key string, end RunEnd) (int, error)
	// WatchEnded calls ended, until ctx ends, with each record of agent
	// (this agent) that EndRun marked, those marked before it was called
	// too. Calls never overlap. It returns ctx.Err(), or an error that
	// retrying cannot fix.
	WatchEnded(ctx context.Context, agent string, ended func(rec RunRecord, end RunEnd)) error
}

// RunRecord is what an agent says of one run it holds a connection of (or
// keeps the names of, for the grace after the connection dropped). A run
// belongs to the key that opened it (Key): an agent lets no other key
// open, re-attach to, move or end a run of that id, on any replica.
type RunRecord struct {
	Run     string `json:"run"`
	Agent   string `json:"agent"`             // the agent instance holding it
	User    string `json:"user"`              // the account (SSH user name)
	Key     string `json:"key"`               // fingerprint of the developer's key, "SHA256:..."
	Comment string `json:"comment,omitempty"` // the key's comment, as the developer's plug said it
	From    string `json:"from"`              // the address its connection came from
	Version string `json:"version,omitempty"` // the developer's plug version; "" for OpenSSH
	Kind    string `json:"kind"`              // KindServes, KindConsumes, KindOpenSSH
	// Container is ContainerDockerrun for a run of plug --dockerrun.
	Container string       `json:"container,omitempty"`
	Since     time.Time    `json:"since"`
	Away      bool         `json:"away,omitempty"` // its connection dropped: its names are kept for the grace
	Names     []RecordName `json:"names,omitempty"`
}

// RecordDigest is a short digest of s: of an agent's or a run's name, or
// of both as "agent/run". Platforms label and name the records of runs with
// it, since label values are too short for a run id.
func RecordDigest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:10])
}

// RecordName is a name a run serves.
type RecordName struct {
	Name  string    `json:"name"`
	Port  int       `json:"port"`
	UDP   bool      `json:"udp,omitempty"` // Port is a UDP port
	Mode  string    `json:"mode"`          // ModeParked or ModeAdded
	Since time.Time `json:"since"`
	// Filter is a personal takeover's (Filter.String); "" for a full one.
	Filter string `json:"filter,omitempty"`
}

// RunEnd says who ended a run, and why.
type RunEnd struct {
	By     string    `json:"by"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// MemberStore is a Platform that keeps the members of admission by
// approval (members.go) in the cluster, where every agent replica reads
// them: kubeplatform in the Secret plug-members. The store holds one
// MemberList, changed only as a whole and only if nobody changed it
// meanwhile.
type MemberStore interface {
	// LoadMembers reads the list. A store that exists but was never
	// written reads as an empty list.
	LoadMembers(ctx context.Context) (MemberList, error)
	// UpdateMembers reads the list, applies change and writes the result,
	// only if nobody wrote meanwhile: otherwise it reads again and applies
	// change again. An error from change writes nothing and is returned.
	// It returns the list as written.
	UpdateMembers(ctx context.Context, change func(*MemberList) error) (MemberList, error)
	// WatchMembers calls update with the list at once and again whenever
	// it changes, until ctx ends. Calls never overlap. It returns
	// ctx.Err(), or an error that retrying cannot fix.
	WatchMembers(ctx context.Context, update func(MemberList)) error
}
