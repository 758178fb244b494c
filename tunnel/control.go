package tunnel

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// The control channel carries what SSH has no word for: the run's identity,
// the agent's events and the goodbye. It is an SSH channel of type
// controlChannelType that the plug CLI opens right after authentication.
// Each message, in either direction, is a JSON object with a "type" field,
// preceded by its length as a 4-byte big-endian integer. The CLI's hello,
// with the names the run serves, is also the open's data: the agent answers
// it as soon as the channel is open (welcome with HelloAtOpen), then serves
// the names, and passes over the copy the CLI sends on the channel for
// agents that ignore the open's data.
//
// CLI to agent: hello, goodbye, moved (the answer to an ended with Move:
// the run now lives on another agent, or could not move), names (the
// catalog is wanted now, by a run whose hello said NamesWhenAsked), status (a
// question, asked without hello: status.go), env (a workload's
// environment, likewise: env.go), agent_update (plug update --agent:
// agentupdate.go). Agent to CLI: welcome, served, event,
// ended, catalog (the names the run can consume, then what changed),
// goodbye (the acknowledgement: every name of the run is given back),
// status (the answer), env_vars and env_done (the environment). Unknown
// types are ignored, so either side may learn new ones.
const (
	controlChannelType = "control@plug"
	maxControlFrame    = 64 << 10

	typeHello   = "hello"
	typeGoodbye = "goodbye"
	typeWelcome = "welcome"
	typeServed  = "served"
	typeEvent   = "event"
	typeEnded   = "ended"
	typeCatalog = "catalog"
	typeMoved   = "moved"
	typeNames   = "names"
)

// Run kinds a hello announces.
const (
	kindServes   = "serves"
	kindConsumes = "consumes"
)

// Limits on the strings of control messages.
const (
	maxShortField = 256  // versions, ids, kinds
	maxTextField  = 4096 // texts shown in a terminal
)

// helloMsg opens a run, or re-attaches to it after a reconnect.
type helloMsg struct {
	Run     string `json:"run"`     // stable across reconnects
	Version string `json:"version"` // the CLI's plug version
	Kind    string `json:"kind"`    // kindServes or kindConsumes
	OS      string `json:"os"`
	Arch    string `json:"arch"`
	Comment string `json:"comment,omitempty"` // the comment of the developer's public key
	// Container is ContainerDockerrun when CMD runs in a local Docker
	// container (plug --dockerrun); "" otherwise. Older agents ignore it.
	Container string `json:"container,omitempty"`
	// Stripes is the most channels the CLI carries one connection over
	// (stripe.go); older CLIs send none and are not striped.
	Stripes int `json:"stripes,omitempty"`
	// Lanes is the most lanes the CLI opens for the connection's UDP
	// flows (lanes.go); older CLIs send none and open none.
	Lanes int `json:"lanes,omitempty"`
	// Deltas says the CLI takes catalog messages with Delta: after the
	// first catalog, the agent sends only what changed. Older CLIs send
	// none and are sent the whole catalog at each change.
	Deltas bool `json:"deltas,omitempty"`
	// NamesWhenAsked says the CLI wants the catalog only once it sends a
	// names message (a run whose command has not looked any name up yet
	// needs none): until then the agent sends no catalog, so a short run
	// in a large namespace receives nothing of it. Older CLIs send none and
	// are sent the catalog at once; older agents ignore it and send it at
	// once.
	NamesWhenAsked bool `json:"namesWhenAsked,omitempty"`
	// Forms says the CLI takes a catalog's aliases as forms
	// (catalogMsg.Forms). Older CLIs send none and are sent every alias.
	Forms bool `json:"forms,omitempty"`
	// Serves are the names the run asks for from its start, in a hello
	// sent as the extra data of the control channel's open (helloAtOpen):
	// the agent serves each as a forward request, saying served or
	// refused for each. A hello sent on the channel serves none of them.
	Serves []askedServe `json:"serves,omitempty"`
}

// askedServe is a name a hello asks for: a tcpip-forward (with Filter, a
// filtered one; with UDP, a datagram-forward) without its round trip.
type askedServe struct {
	Name   string  `json:"name"`
	Port   int     `json:"port"`
	UDP    bool    `json:"udp,omitempty"`
	Filter *Filter `json:"filter,omitempty"`
}

// maxAskedServes bounds the names one hello asks for; each is counted
// against the key's names as a forward request is.
const maxAskedServes = 64

// welcomeMsg answers a hello.
type welcomeMsg struct {
	Version  string `json:"version"`  // the agent's plug version
	Agent    string `json:"agent"`    // the agent instance (pod or task name)
	Platform string `json:"platform"` // what the agent runs on
	Resumed  bool   `json:"resumed"`  // the run existed: its names were kept
	Names    bool   `json:"names"`    // catalog messages follow
	// Datagrams says the agent opens datagram channels (udp.go).
	Datagrams bool `json:"datagrams,omitempty"`
	// Filters says the agent serves personal takeovers
	// (filteredForwardRequest).
	Filters bool `json:"filters,omitempty"`
	// Stripes is the most channels the agent carries one connection over,
	// the smaller of its own and the hello's (stripe.go); 0: none.
	Stripes int `json:"stripes,omitempty"`
	// Lanes is the most lanes the connection may have, the smaller of the
	// agent's and the hello's (lanes.go), and LaneToken the token a lane
	// names it by; 0 and "": none.
	Lanes     int    `json:"lanes,omitempty"`
	LaneToken string `json:"laneToken,omitempty"`
	// UDPServe says the agent takes datagram-forward requests (udp.go):
	// a run may serve a name's UDP port, if the platform can.
	UDPServe bool `json:"udpServe,omitempty"`
	// HelloAtOpen says the agent took the hello the control channel's
	// open carried, and serves its Serves: a served message or a refused
	// event with the name follows for each. Older agents ignore the
	// open's data, answer the hello sent on the channel, and serve only
	// what forward requests ask for.
	HelloAtOpen bool `json:"helloAtOpen,omitempty"`
	// NamesWhenAsked says the agent took the hello's NamesWhenAsked: the
	// catalog follows the CLI's names message, not the welcome.
	NamesWhenAsked bool `json:"namesWhenAsked,omitempty"`
}

// servedMsg tells the CLI a name it asked for is served; it precedes the
// reply to the tcpip-forward request.
type servedMsg struct {
	Name     string `json:"name"`
	Port     int    `json:"port"`
	UDP      bool   `json:"udp,omitempty"` // the port served is UDP
	TookOver bool   `json:"took_over"`
	Detail   string `json:"detail"`
}

// eventMsg is an Event about the run's names. An event of kind EventRefused
// precedes the failure reply to a tcpip-forward request and says why.
type eventMsg struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	Text string `json:"text"`
}

// endedMsg says the agent ended the run. With Retry the agent is only going
// away (shutting down) and the CLI reconnects, to it or to another replica.
// With Move too, the agent keeps the connection and the run's names until
// the CLI has moved the run to another agent over a new connection: the
// CLI then says moved and closes this one (a CLI that does not know Move
// closes it at once and reconnects).
type endedMsg struct {
	By     string `json:"by"`
	Reason string `json:"reason"`
	Retry  bool   `json:"retry,omitempty"`
	Move   bool   `json:"move,omitempty"`
}

// movedMsg answers an endedMsg with Move: the run moved, and Agent serves
// its names now; or, with Agent empty, the CLI found no other agent, and
// this one gives the names back while the CLI goes on answering callers.
type movedMsg struct {
	Agent string `json:"agent"`
}

// namesMsg asks for the catalog, CLI to agent, when the hello said
// NamesWhenAsked: the agent sends it now, then its changes. Asking again
// changes nothing.
type namesMsg struct{}

// goodbyeMsg ends a run on purpose (CLI to agent), and acknowledges that
// every name of the run was given back (agent to CLI).
type goodbyeMsg struct{}

// message is a control message that knows its type. Every message type
// is listed here.
type message interface{ controlType() string }

func (helloMsg) controlType() string       { return typeHello }
func (welcomeMsg) controlType() string     { return typeWelcome }
func (servedMsg) controlType() string      { return typeServed }
func (eventMsg) controlType() string       { return typeEvent }
func (endedMsg) controlType() string       { return typeEnded }
func (goodbyeMsg) controlType() string     { return typeGoodbye }
func (movedMsg) controlType() string       { return typeMoved }
func (agentUpdateMsg) controlType() string { return typeAgentUpdate }
func (catalogMsg) controlType() string     { return typeCatalog }
func (namesMsg) controlType() string       { return typeNames }
func (envMsg) controlType() string         { return typeEnv }
func (envVarsMsg) controlType() string     { return typeEnvVars }
func (envDoneMsg) controlType() string     { return typeEnvDone }
func (membersMsg) controlType() string     { return typeMembers }
func (statusMsg) controlType() string      { return typeStatus }
func (volumeMsg) controlType() string      { return typeVolume }
func (volumeReadyMsg) controlType() string { return typeVolumeReady }
func (whoMsg) controlType() string         { return typeWho }
func (endMsg) controlType() string         { return typeEnd }
func (auditMsg) controlType() string       { return typeAudit }

// encodeFrame returns m as one frame: length, then the JSON object with its
// "type" field.
func encodeFrame(m message) ([]byte, error) {
	body, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	typ, _ := json.Marshal(m.controlType())
	obj := `{"type":` + string(typ)
	if len(body) > 2 {
		obj += "," + string(body[1:])
	} else {
		obj += "}"
	}
	if len(obj) > maxControlFrame {
		return nil, fmt.Errorf("control message %s is %d bytes, more than %d", m.controlType(), len(obj), maxControlFrame)
	}
	frame := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(obj)), uint32(len(obj)))
	return append(frame, obj...), nil
}

var errFrameTooLarge = errors.New("control message larger than 64 KiB")

// readFrame reads one frame and returns its JSON object.
func readFrame(r io.Reader) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n > maxControlFrame {
		return nil, errFrameTooLarge
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, io.ErrUnexpectedEOF
	}
	return body, nil
}

// decodeType returns the "type" field of a frame's object.
func decodeType(frame []byte) (string, error) {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(frame, &head); err != nil {
		return "", fmt.Errorf("control message is not a JSON object: %w", err)
	}
	if head.Type == "" || len(head.Type) > maxShortField {
		return "", errors.New("control message without a type")
	}
	return head.Type, nil
}

// checkedMsg is a control message *T that checks itself as a peer sent
// it: check validates it and makes its strings safe for a terminal in
// place.
type checkedMsg[T any] interface {
	*T
	message
	check() error
}

// decodeMsg reads a control frame as a T and checks it.
func decodeMsg[T any, P checkedMsg[T]](frame []byte) (T, error) {
	m, err := readMsg[T](frame, P(new(T)).controlType())
	if err != nil {
		return m, err
	}
	return m, P(&m).check()
}

// readMsg reads a control frame as a T, unchecked: for a message whose
// reader checks it as it goes. what names the message in the error of a
// frame that is not a T.
func readMsg[T any](frame []byte, what string) (T, error) {
	var m T
	if err := json.Unmarshal(frame, &m); err != nil {
		return m, fmt.Errorf("malformed %s: %w", what, err)
	}
	return m, nil
}

// handleMsg decodes frame with decode and hands the message to handle; a
// frame decode refuses is handled by nobody.
func handleMsg[T any](frame []byte, decode func([]byte) (T, error), handle func(T)) error {
	m, err := decode(frame)
	if err != nil {
		return err
	}
	handle(m)
	return nil
}

// checkList checks a list a peer sent: at most max items, each of which
// check validates and makes safe for a terminal in place. An error is
// prefixed with what, and names item and its index.
func checkList[T any](what, item string, list []T, max int, check func(*T) error) error {
	if len(list) > max {
		return fmt.Errorf("%s: %d %ss, more than %d", what, len(list), item, max)
	}
	for i := range list {
		if err := check(&list[i]); err != nil {
			return fmt.Errorf("%s: %s %d: %w", what, item, i, err)
		}
	}
	return nil
}

// checkFields runs checkShort on each of shorts and checkText on each of
// texts; an error is prefixed with what.
func checkFields(what string, shorts, texts []*string) error {
	for _, f := range shorts {
		if err := checkShort(f); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	for _, f := range texts {
		if err := checkText(f); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return nil
}

func (m *helloMsg) check() error {
	if err := checkRunID(m.Run); err != nil {
		return err
	}
	if m.Kind != kindServes && m.Kind != kindConsumes {
		return fmt.Errorf("hello: kind %q is neither %q nor %q", m.Kind, kindServes, kindConsumes)
	}
	if err := checkFields("hello", []*string{&m.Version, &m.OS, &m.Arch, &m.Comment}, nil); err != nil {
		return err
	}
	if m.Container != "" && m.Container != ContainerDockerrun {
		return fmt.Errorf("hello: container %q is not %q", m.Container, ContainerDockerrun)
	}
	return checkList("hello", "serve", m.Serves, maxAskedServes, (*askedServe).check)
}

// check refuses an asked serve that a forward request of it would not
// parse: a name, a port, and a filter that is not empty.
func (a *askedServe) check() error {
	if err := CheckName(a.Name); err != nil {
		return err
	}
	if err := CheckPort(a.Port); err != nil {
		return fmt.Errorf("%s: %w", a.Name, err)
	}
	if a.Filter == nil {
		return nil
	}
	if a.UDP {
		return fmt.Errorf("%s: a UDP port has no filter", a.Name)
	}
	if a.Filter.Empty() {
		return fmt.Errorf("the filter of %s is empty", a.Name)
	}
	return a.Filter.Check()
}

func (m *welcomeMsg) check() error {
	return checkFields("welcome", []*string{&m.Version, &m.Agent, &m.Platform}, nil)
}

func (m *servedMsg) check() error {
	if err := CheckName(m.Name); err != nil {
		return fmt.Errorf("served: %w", err)
	}
	if err := CheckPort(m.Port); err != nil {
		return fmt.Errorf("served: %w", err)
	}
	return checkText(&m.Detail)
}

func (m *eventMsg) check() error {
	if m.Name != "" {
		if err := CheckName(m.Name); err != nil {
			return fmt.Errorf("event: %w", err)
		}
	}
	if err := checkShort(&m.Kind); err != nil {
		return fmt.Errorf("event: %w", err)
	}
	return checkText(&m.Text)
}

func (m *endedMsg) check() error {
	if err := checkShort(&m.By); err != nil {
		return fmt.Errorf("ended: %w", err)
	}
	return checkText(&m.Reason)
}

func (m *movedMsg) check() error { return checkShort(&m.Agent) }

// A goodbye has no fields to check.
func (*goodbyeMsg) check() error { return nil }

// checkRunID accepts 1 to 64 characters of [A-Za-z0-9._-].
func checkRunID(id string) error {
	if id == "" || len(id) > 64 {
		return fmt.Errorf("run id %q must be 1 to 64 characters", id)
	}
	for _, c := range []byte(id) {
		if !isLower(c) && !isDigit(c) && !(c >= 'A' && c <= 'Z') && c != '-' && c != '_' && c != '.' {
			return fmt.Errorf("run id %q may hold only letters, digits, '.', '_' and '-'", id)
		}
	}
	return nil
}

func checkShort(s *string) error {
	if len(*s) > maxShortField {
		return fmt.Errorf("field longer than %d bytes", maxShortField)
	}
	*s = printable(*s)
	return nil
}

// checkText accepts a text for the terminal: it may span lines (a remedy
// to copy, e.g. a YAML snippet), but holds no other control character.
func checkText(s *string) error {
	if len(*s) > maxTextField {
		return fmt.Errorf("text longer than %d bytes", maxTextField)
	}
	*s = printableLines(*s)
	return nil
}

// printable escapes what is not printable text (see PeerText), so that a
// text shown in a terminal cannot move its cursor or change its colours.
func printable(s string) string { return escapeText(s, false) }

// printableLines is printable, but keeps line feeds.
func printableLines(s string) string { return escapeText(s, true) }

// controlConn reads and writes control messages on a channel. Writes are
// serialised; reads belong to one goroutine.
type controlConn struct {
	rw io.ReadWriteCloser
	mu sync.Mutex
}

func (c *controlConn) send(m message) error {
	frame, err := encodeFrame(m)
	if err != nil {
		return err
	}
	return c.write(frame)
}

// write sends a frame encodeFrame made.
func (c *controlConn) write(frame []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.rw.Write(frame)
	return err
}

// receive returns the next frame and its type.
func (c *controlConn) receive() (string, []byte, error) {
	frame, err := readFrame(c.rw)
	if err != nil {
		return "", nil, err
	}
	typ, err := decodeType(frame)
	return typ, frame, err
}
