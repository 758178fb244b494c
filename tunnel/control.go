package tunnel

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode"
)

// The control channel carries what SSH has no word for: the run's identity,
// the agent's events and the goodbye. It is an SSH channel of type
// controlChannelType that the plug CLI opens right after authentication.
// Each message, in either direction, is a JSON object with a "type" field,
// preceded by its length as a 4-byte big-endian integer.
//
// CLI to agent: hello, goodbye, status (a question, asked without hello:
// status.go). Agent to CLI: welcome, served, event, ended, catalog (the
// names the run can consume, again at each change), goodbye (the
// acknowledgement: every name of the run is given back) and status (the
// answer). Unknown types are ignored, so either side may learn new ones.
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
}

// welcomeMsg answers a hello.
type welcomeMsg struct {
	Version  string `json:"version"`  // the agent's plug version
	Agent    string `json:"agent"`    // the agent instance (pod or task name)
	Platform string `json:"platform"` // what the agent runs on
	Resumed  bool   `json:"resumed"`  // the run existed: its names were kept
	Names    bool   `json:"names"`    // catalog messages follow
}

// servedMsg tells the CLI a name it asked for is served; it precedes the
// reply to the tcpip-forward request.
type servedMsg struct {
	Name     string `json:"name"`
	Port     int    `json:"port"`
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
type endedMsg struct {
	By     string `json:"by"`
	Reason string `json:"reason"`
	Retry  bool   `json:"retry,omitempty"`
}

// goodbyeMsg ends a run on purpose (CLI to agent), and acknowledges that
// every name of the run was given back (agent to CLI).
type goodbyeMsg struct{}

// message is a control message that knows its type.
type message interface{ controlType() string }

func (helloMsg) controlType() string   { return typeHello }
func (welcomeMsg) controlType() string { return typeWelcome }
func (servedMsg) controlType() string  { return typeServed }
func (eventMsg) controlType() string   { return typeEvent }
func (endedMsg) controlType() string   { return typeEnded }
func (goodbyeMsg) controlType() string { return typeGoodbye }

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

func decodeHello(frame []byte) (helloMsg, error) {
	var m helloMsg
	if err := json.Unmarshal(frame, &m); err != nil {
		return m, fmt.Errorf("malformed hello: %w", err)
	}
	if err := checkRunID(m.Run); err != nil {
		return m, err
	}
	if m.Kind != kindServes && m.Kind != kindConsumes {
		return m, fmt.Errorf("hello: kind %q is neither %q nor %q", m.Kind, kindServes, kindConsumes)
	}
	for _, f := range []*string{&m.Version, &m.OS, &m.Arch} {
		if err := checkShort(f); err != nil {
			return m, fmt.Errorf("hello: %w", err)
		}
	}
	return m, nil
}

func decodeWelcome(frame []byte) (welcomeMsg, error) {
	var m welcomeMsg
	if err := json.Unmarshal(frame, &m); err != nil {
		return m, fmt.Errorf("malformed welcome: %w", err)
	}
	for _, f := range []*string{&m.Version, &m.Agent, &m.Platform} {
		if err := checkShort(f); err != nil {
			return m, fmt.Errorf("welcome: %w", err)
		}
	}
	return m, nil
}

func decodeServed(frame []byte) (servedMsg, error) {
	var m servedMsg
	if err := json.Unmarshal(frame, &m); err != nil {
		return m, fmt.Errorf("malformed served: %w", err)
	}
	if err := CheckName(m.Name); err != nil {
		return m, fmt.Errorf("served: %w", err)
	}
	if err := CheckPort(m.Port); err != nil {
		return m, fmt.Errorf("served: %w", err)
	}
	return m, checkText(&m.Detail)
}

func decodeEvent(frame []byte) (eventMsg, error) {
	var m eventMsg
	if err := json.Unmarshal(frame, &m); err != nil {
		return m, fmt.Errorf("malformed event: %w", err)
	}
	if m.Name != "" {
		if err := CheckName(m.Name); err != nil {
			return m, fmt.Errorf("event: %w", err)
		}
	}
	if err := checkShort(&m.Kind); err != nil {
		return m, fmt.Errorf("event: %w", err)
	}
	return m, checkText(&m.Text)
}

func decodeEnded(frame []byte) (endedMsg, error) {
	var m endedMsg
	if err := json.Unmarshal(frame, &m); err != nil {
		return m, fmt.Errorf("malformed ended: %w", err)
	}
	if err := checkShort(&m.By); err != nil {
		return m, fmt.Errorf("ended: %w", err)
	}
	return m, checkText(&m.Reason)
}

func decodeGoodbye(frame []byte) (goodbyeMsg, error) {
	var m goodbyeMsg
	if err := json.Unmarshal(frame, &m); err != nil {
		return m, fmt.Errorf("malformed goodbye: %w", err)
	}
	return m, nil
}

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

// printable replaces control characters, so that a text shown in a terminal
// cannot move its cursor or change its colours.
func printable(s string) string {
	return keepPrintable(s, false)
}

// printableLines is printable, but keeps line feeds.
func printableLines(s string) string {
	return keepPrintable(s, true)
}

func keepPrintable(s string, lines bool) string {
	bad := func(r rune) bool { return unicode.IsControl(r) && !(lines && r == '\n') }
	if strings.IndexFunc(s, bad) < 0 {
		return s
	}
	return strings.Map(func(r rune) rune {
		if bad(r) {
			return '?'
		}
		return r
	}, s)
}

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
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err = c.rw.Write(frame)
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
