package tunnel

import (
	"encoding/json"
	"io"
	"strings"
	"sync"
	"time"
)

// The audit trail is one AuditEvent per thing that happened to a person's
// access: a run opened and how it ended, each name served and given back,
// a key refused, requested, accepted, refused or removed by a member. The
// agent hands each to Agent.Audit; plug agent writes them as JSON lines on
// its standard output (AuditJSON), where a cluster's log collector picks
// them up, so that "who was serving checkout on Tuesday at three" is a
// search:
//
//	kubectl logs deploy/plug | grep '"name":"checkout"'
//
// Every string a peer chose (user names, key comments, versions, reasons)
// reaches the line JSON-encoded: it cannot forge a line or move a cursor.

// AuditSchema is the version of the audit trail's schema, deploy/README.md
// "The audit trail", written in every line as "schema". Within a version
// events and fields are only added; one that changes meaning or goes away
// raises it.
const AuditSchema = 1

// Audit event names (AuditEvent.Event).
const (
	AuditRunOpened    = "run.opened"      // Run, User, Key, Comment, From, Version, Kind
	AuditRunAway      = "run.away"        // a run's connection dropped; kept for the grace: Reason says where its callers go meanwhile
	AuditRunResumed   = "run.resumed"     // a dropped run came back: Run, From
	AuditRunEnded     = "run.ended"       // How, By, Reason, Seconds, Names
	AuditRunRefused   = "run.refused"     // a key was turned away: User, Key, From, Reason
	AuditNameServed   = "name.served"     // Name, Port, Mode
	AuditNameBack     = "name.given_back" // Name, Port, Mode, Seconds
	AuditVolumeServed = "volume.served"   // a helper serves a volume to the run: Name and Port (the helper's), Reason (KIND/NAME:VOLUME)
	AuditVolumeBack   = "volume.removed"  // the helper of a run's volume is removed: Name, Port
	AuditKeyRequest   = "key.requested"   // a non-member's key recorded as pending: Key, User, From
	AuditKeyAccepted  = "key.accepted"    // By accepted Key for User
	AuditKeyRefused   = "key.refused"     // By refused Key's pending request
	AuditKeyRemoved   = "key.removed"     // By removed Key: its runs end
	AuditKeyAdmin     = "key.admin"       // By made Key an admin (open admission)
	AuditKeyUnadmin   = "key.unadmin"     // By took Key's admin back
	AuditMembersReset = "members.reset"   // By forgot every member
	AuditKeyDenied    = "key.denied"      // By denied Key (Reason): its runs end, it is refused until lifted
	AuditKeyUndenied  = "key.undenied"    // By lifted Key's denial
	AuditRunDial      = "run.dial"        // PLUG_AUDIT_DIALS: a run's connection into the cluster: Run, User, Key, From, Name, Port, UDP, Reason (refused), Dropped
	AuditEnvRead      = "env.read"        // --env-from: User, Key, From, Workload, and Read: the ConfigMaps and Secrets and their keys (never a value)

	// plug update --agent: By (User, Key, From) asked to move the agent to
	// Image; it was refused (Reason), or it ran and then the agent runs
	// Image (Previous before), or the rollout failed and was undone
	// (Reason says what failed, and whether the undo did).
	AuditAgentUpdate        = "agent.update"
	AuditAgentUpdateRefused = "agent.update_refused"
	AuditAgentUpdated       = "agent.updated"
	AuditAgentUpdateFailed  = "agent.update_failed"
)

// How a run ended (AuditEvent.How, and RunEnd.How).
const (
	EndGoodbye      = "goodbye"       // the developer's plug said goodbye: CMD exited or Ctrl-C
	EndDropped      = "dropped"       // the connection was lost and did not come back
	EndEnded        = "ended"         // somebody ended it (plug end): By, Reason
	EndKeyRemoved   = "key_removed"   // its key was taken back: By, Reason
	EndClosed       = "closed"        // a switch closed the tunnel: By names it
	EndAgentStopped = "agent_stopped" // the agent stopped (the run may go on with another)
	EndMoved        = "moved"         // the agent stopped, and the run moved to another agent (Reason names it), which serves its names
)

// Name modes (AuditEvent.Mode).
const (
	ModeParked = "parked" // a deployed service was set aside for the run
	ModeAdded  = "added"  // a name the cluster did not have
)

// AuditEvent is one line of the audit trail. Empty fields are left out of
// the line.
type AuditEvent struct {
	Schema  int       `json:"schema"` // AuditSchema, set by AuditJSON
	Time    time.Time `json:"time"`
	Event   string    `json:"event"`
	Agent   string    `json:"agent,omitempty"`   // the agent instance that saw it
	Run     string    `json:"run,omitempty"`     // the run's id
	User    string    `json:"user,omitempty"`    // the account (SSH user name)
	Key     string    `json:"key,omitempty"`     // "SHA256:..." of the developer's key
	Comment string    `json:"comment,omitempty"` // the key's comment, as the developer's plug said it
	From    string    `json:"from,omitempty"`    // the address the connection came from
	Version string    `json:"version,omitempty"` // the developer's plug version
	Kind    string    `json:"kind,omitempty"`    // what the run said it is: KindServes, KindConsumes, KindOpenSSH
	// Container is ContainerDockerrun for a run of plug --dockerrun.
	Container string `json:"container,omitempty"`
	Name      string `json:"name,omitempty"`
	Port      int    `json:"port,omitempty"`
	UDP       bool   `json:"udp,omitempty"`  // Port is a UDP port
	Mode      string `json:"mode,omitempty"` // ModeParked or ModeAdded
	// Filter is a personal takeover's (Filter.String), when the name was
	// served.
	Filter string   `json:"filter,omitempty"`
	How    string   `json:"how,omitempty"` // how a run ended: EndGoodbye...
	By     string   `json:"by,omitempty"`  // who did it (a member's account and key, a switch)
	Reason string   `json:"reason,omitempty"`
	Names  []string `json:"names,omitempty"` // a run's names when it ended, "name:port" ("name:port/udp")
	// Image is the image plug update --agent asked for, Previous the one
	// the agent ran before.
	Image    string `json:"image,omitempty"`
	Previous string `json:"previous,omitempty"`
	// Seconds is how long a run lasted, or a name was served, to a tenth.
	Seconds *float64 `json:"seconds,omitempty"`
	// Workload is the workload whose environment was read (Env.Workload),
	// Read the ConfigMaps and Secrets its values came from, and their keys.
	Workload string      `json:"workload,omitempty"`
	Read     []EnvSource `json:"read,omitempty"`
	// Dropped is how many dial events of the key were left out (over
	// its bound) since the last one written.
	Dropped int `json:"dropped,omitempty"`
	// UserAsserted says User is the name the client asserted, which
	// nothing verified (open admission): the key is the identity.
	UserAsserted bool `json:"user_asserted,omitempty"`
}

// Run kinds (AuditEvent.Kind, RunRecord.Kind).
const (
	KindServes   = kindServes   // a plug -s run
	KindConsumes = kindConsumes // a plug -c run: a client only
	// ContainerDockerrun marks a run whose CMD is a local Docker container
	// (plug --dockerrun), in RunRecord, Plugged and AuditEvent.
	ContainerDockerrun = "dockerrun"
	KindOpenSSH        = "openssh" // a plain SSH client, without plug's hello
)

// AuditJSON returns an audit sink writing each event to w as one JSON line.
// Lines are written whole, one at a time; write errors are dropped (an
// audit trail that cannot be written must not stop the agent).
func AuditJSON(w io.Writer) func(AuditEvent) {
	var mu sync.Mutex
	return func(e AuditEvent) {
		e.Schema = AuditSchema
		line, err := json.Marshal(e)
		if err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		w.Write(append(line, '\n'))
	}
}

// audit stamps e with the time and this agent, and hands it to the sink.
func (a *Agent) audit(e AuditEvent) {
	if a.Audit == nil {
		return
	}
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	e.Agent = a.ID
	if e.User != "" && !strings.HasPrefix(e.Event, "key.") && !strings.HasPrefix(e.Event, "members.") && a.usersAsserted() {
		e.UserAsserted = true
	}
	a.Audit(e)
}

// usersAsserted reports whether the user names developers connect with
// are only what their clients assert: with open admission nothing checks
// them (admission by approval, and a gateway's key deposit, hold each key
// to one account).
func (a *Agent) usersAsserted() bool {
	if a.Keys == nil {
		return true
	}
	m, ok := a.Keys.(*Members)
	return ok && !m.Invite()
}

// secondsSince is how long since t, in seconds to a tenth, for Seconds.
func secondsSince(t time.Time) *float64 {
	s := float64(time.Since(t).Round(100*time.Millisecond)) / float64(time.Second)
	return &s
}

// modeOf is the audit's word for what serving a name did.
func modeOf(s Served) string {
	if s.TookOver {
		return ModeParked
	}
	return ModeAdded
}
