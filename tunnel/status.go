package tunnel

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// The status request is what plug doctor asks an agent, on the control
// channel and without a hello, so that no run is opened: the CLI sends a
// status message with no fields; the agent answers with a status message
// saying its version, what it runs on, whether it serves runs, and each
// right it has or lacks in the cluster, checked afresh.
const typeStatus = "status"

const (
	// statusWait is how long Diagnose waits for the agent's status: an
	// agent older than the status request never answers it.
	statusWait = 5 * time.Second
	// maxStatusRights bounds the rights of a status.
	maxStatusRights = 256
	// statusRecheck: a status request on the same connection less than
	// this after the previous one is answered from a check of the rights
	// at most this old, so that a client asking again and again costs the
	// cluster's API server one check a second at most.
	statusRecheck = time.Second
)

// statusMsg asks for the agent's status (CLI to agent, no fields) and
// answers it (agent to CLI).
type statusMsg struct {
	Version     string        `json:"version,omitempty"`  // the agent's plug version
	Agent       string        `json:"agent,omitempty"`    // the agent instance
	Platform    string        `json:"platform,omitempty"` // what the agent runs on
	Refusing    string        `json:"refusing,omitempty"` // why it refuses runs; "" when it serves them
	Rights      []statusRight `json:"rights,omitempty"`
	RightsError string        `json:"rights_error,omitempty"` // why the rights could not be checked
	// Admission is AdmissionInvite or AdmissionOpen; "" from an agent
	// older than the field.
	Admission string `json:"admission,omitempty"`
}

// Admission modes (AgentStatus.Admission).
const (
	AdmissionInvite = "invite" // only the keys a member accepted get in
	AdmissionOpen   = "open"   // any key that reaches the agent gets in
)

// statusRight is a Right in a status message.
type statusRight struct {
	Rule     string `json:"rule"`
	Feature  string `json:"feature"`
	Required bool   `json:"required"`
	Granted  bool   `json:"granted"`
	Fix      string `json:"fix,omitempty"`
}

func (m *statusMsg) check() error {
	if len(m.Rights) == 0 {
		m.Rights = nil
	}
	if err := checkFields("status", []*string{&m.Version, &m.Agent, &m.Platform, &m.Admission}, []*string{&m.Refusing, &m.RightsError}); err != nil {
		return err
	}
	return checkList("status", "right", m.Rights, maxStatusRights, func(r *statusRight) error {
		return cmp.Or(checkText(&r.Rule), checkText(&r.Feature), checkText(&r.Fix))
	})
}

// answerStatus answers a status request with the agent's rights, checked
// afresh (see statusRecheck): a check that finds them sufficient lets an
// agent that refused runs serve them at once. One status request of a
// connection is answered at a time.
func (dc *devConn) answerStatus() {
	a := dc.a
	maxAge := time.Duration(0)
	if time.Since(dc.lastStatus) < statusRecheck {
		maxAge = statusRecheck
	}
	dc.lastStatus = time.Now()
	rights, err := a.checkRights(a.ctx, maxAge)
	m := statusMsg{Version: Version, Agent: a.ID, Platform: a.platformName(), Refusing: a.refusal(), Admission: AdmissionOpen}
	if keys, ok := a.Keys.(*Members); ok && keys.Invite() {
		m.Admission = AdmissionInvite
	}
	if err != nil {
		m.RightsError = err.Error()
	}
	for _, r := range rights[:min(len(rights), maxStatusRights)] {
		m.Rights = append(m.Rights, statusRight{Rule: r.Rule, Feature: r.Feature, Required: r.Required, Granted: r.Granted, Fix: r.Fix})
	}
	dc.logf("status asked by %s (%s) from %s", dc.user, dc.fingerprint, dc.conn.RemoteAddr())
	dc.sendControl(m)
}

// AgentStatus is what an agent says of itself to a status request.
type AgentStatus struct {
	Version  string
	Agent    string
	Platform string
	// Refusing says why the agent refuses runs; "" when it serves them.
	Refusing string
	Rights   []Right
	// RightsError says why the agent could not check its rights.
	RightsError string
	// Admission is AdmissionInvite or AdmissionOpen; "" when the agent
	// does not say.
	Admission string
}

// Diagnosis is what Diagnose learnt of an agent.
type Diagnosis struct {
	// AgentVersion is the agent's plug version, from its SSH version
	// string; "" when the server is not a plug agent.
	AgentVersion string
	// Handshake is how long connecting and authenticating took.
	Handshake time.Duration
	// Status is the agent's answer to the status request; nil when it does
	// not answer one (an agent older than the request).
	Status *AgentStatus
}

// Diagnose connects to the agent as Connect would (the same errors:
// *UnreachableError, *HostKeyError, *AuthError) but opens no run: it asks
// the agent's status, which a refusing agent answers too.
func Diagnose(ctx context.Context, cfg ClientConfig) (*Diagnosis, error) {
	start := time.Now()
	q, err := openQuestions(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer q.close()
	d := &Diagnosis{AgentVersion: agentVersion(string(q.conn.ServerVersion())), Handshake: time.Since(start)}
	if q.err != nil {
		return nil, q.err
	}
	var m statusMsg
	var unreadable error
	err = q.ask(statusMsg{}, typeStatus, statusWait, func(frame []byte) (bool, error) {
		m, unreadable = decodeMsg[statusMsg](frame)
		return false, nil
	})
	if err != nil {
		return d, nil // no answer: an agent older than the status request
	}
	if unreadable != nil {
		return nil, fmt.Errorf("the agent at %s sent a status plug cannot read: %w", cfg.Addr, unreadable)
	}
	st := &AgentStatus{Version: m.Version, Agent: m.Agent, Platform: m.Platform, Refusing: m.Refusing, RightsError: m.RightsError, Admission: m.Admission}
	for _, r := range m.Rights {
		st.Rights = append(st.Rights, Right{Rule: r.Rule, Feature: r.Feature, Required: r.Required, Granted: r.Granted, Fix: r.Fix})
	}
	d.Status = st
	return d, nil
}

// questions is a connection to an agent that opens no run, to ask it
// questions on its control channel: its status, who is plugged in.
type questions struct {
	cfg     ClientConfig
	conn    ssh.Conn
	control *controlConn
	err     error // the control channel could not be opened: not a plug agent
}

// openQuestions connects and authenticates as Connect does (the same
// errors), and opens the control channel without saying hello. q.err says
// when the server is no plug agent.
func openQuestions(ctx context.Context, cfg ClientConfig) (*questions, error) {
	if cfg.Addr == "" || cfg.User == "" || cfg.Signer == nil || cfg.HostKey == nil {
		return nil, errors.New("tunnel: a ClientConfig needs Addr, User, Signer and HostKey")
	}
	if cfg.Run.Version == "" {
		cfg.Run.Version = Version
	}
	s := &Session{cfg: cfg}
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	conn, chans, reqs, abort, err := s.handshake(ctx)
	if err != nil {
		return nil, err
	}
	if !abort() {
		conn.Close()
		return nil, unreachable(cfg.Addr, context.DeadlineExceeded)
	}
	q := &questions{cfg: cfg, conn: conn}
	go rejectChannels(chans)
	go answerRequests(reqs)
	ch, creqs, err := conn.OpenChannel(controlChannelType, nil)
	if err != nil {
		q.err = &UnreachableError{Addr: cfg.Addr, Reason: "the server there is not a plug agent: " + err.Error(), Err: err}
		return q, nil
	}
	go ssh.DiscardRequests(creqs)
	q.control = &controlConn{rw: ch}
	return q, nil
}

// openAgent is openQuestions for a question only a plug agent answers: a
// server that is not one is an error (q.err), and nothing is left open.
func openAgent(ctx context.Context, cfg ClientConfig) (*questions, error) {
	q, err := openQuestions(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if q.err != nil {
		q.close()
		return nil, q.err
	}
	return q, nil
}

// ask sends m and passes each answer of type want to each, until each
// says it was the last part (more false) or fails, all within wait. An
// answer that takes longer than wait is an error saying so.
func (q *questions) ask(m message, want string, wait time.Duration, each func(frame []byte) (more bool, err error)) error {
	timer := time.AfterFunc(wait, func() { q.conn.Close() })
	defer timer.Stop()
	if err := q.control.send(m); err != nil {
		return unreachable(q.cfg.Addr, err)
	}
	for {
		typ, frame, err := q.control.receive()
		if err != nil {
			return fmt.Errorf("the agent at %s did not answer (%v); an agent older than this plug does not know the question: update it", q.cfg.Addr, err)
		}
		if typ != want {
			continue
		}
		if more, err := each(frame); err != nil || !more {
			return err
		}
	}
}

// askDecoded is ask with each answer read by decode before each sees it:
// an answer decode refuses is an error saying the agent's answer cannot be
// read.
func askDecoded[T any](q *questions, m message, want string, wait time.Duration, decode func([]byte) (T, error), each func(T) (more bool, err error)) error {
	return q.ask(m, want, wait, func(frame []byte) (bool, error) {
		a, err := decode(frame)
		if err != nil {
			return false, fmt.Errorf("the agent at %s sent an answer plug cannot read: %w", q.cfg.Addr, err)
		}
		return each(a)
	})
}

func (q *questions) close() { q.conn.Close() }

// rejectChannels refuses the channels an agent opens to a connection that
// serves nothing.
func rejectChannels(chans <-chan ssh.NewChannel) {
	for nc := range chans {
		nc.Reject(ssh.Prohibited, "this connection serves nothing")
	}
}

// agentVersion reads the plug version in an agent's SSH version string,
// "SSH-2.0-plug_VERSION"; "" when it is not a plug agent's.
func agentVersion(serverVersion string) string {
	v, ok := strings.CutPrefix(serverVersion, "SSH-2.0-plug_")
	if !ok {
		return ""
	}
	return printable(v)
}

// Compatible says whether a CLI and an agent of the given versions work
// together, and why; profile names the profile in the command it gives.
// Releases (vMAJOR.MINOR.PATCH, as build.sh stamps them from a tag) are
// compatible within a major version: the control protocol only gains
// messages, which the older side ignores. A different major version is not,
// and the answer names the command that aligns them. Builds that are not
// releases are judged by the protocol alone: an agent that answered a hello
// or a status request speaks it.
func Compatible(cli, agent, profile string) (bool, string) {
	if cli == agent {
		return true, "the same plug " + cli + " on both ends"
	}
	cm, cmin, cok := releaseVersion(cli)
	am, amin, aok := releaseVersion(agent)
	switch {
	case cok && aok && cm == am && cmin == amin:
		return true, fmt.Sprintf("CLI %s and agent %s: compatible (same major version)", cli, agent)
	case cok && aok && cm == am:
		return true, fmt.Sprintf("CLI %s and agent %s differ in minor version: compatible (same major version); to align them, %s", cli, agent, updateCommand(profile, cmin < amin, cli))
	case cok && aok:
		return false, fmt.Sprintf("CLI %s and agent %s: different major versions, which do not work together; %s", cli, agent, updateCommand(profile, cm < am, cli))
	}
	return true, fmt.Sprintf("CLI %s and agent %s: not releases; the agent speaks plug's control protocol", cli, agent)
}

// updateCommand is what brings the older side to the newer one's version:
// the CLI to the agent's, or the agent to the CLI's.
func updateCommand(profile string, cliOlder bool, cli string) string {
	if profile == "" {
		profile = "PROFILE"
	}
	if cliOlder {
		return "run plug update -p " + profile
	}
	return "re-apply the agent's manifest with plug's image of " + cli + " (the cluster admin does it), or, on Kubernetes with a key that oversees the agent, run plug update -p " + profile + " --agent IMAGE with that image"
}

// VersionError is a run refused because the CLI and the agent are of
// different major versions; Error names the command that aligns them.
type VersionError struct {
	CLI, Agent string
	Says       string // Compatible's answer
}

func (e *VersionError) Error() string { return e.Says }

// releaseVersion reads MAJOR and MINOR of "vMAJOR.MINOR.PATCH[-suffix]".
func releaseVersion(v string) (major, minor int, ok bool) {
	rest, ok := strings.CutPrefix(v, "v")
	if !ok {
		return 0, 0, false
	}
	parts := strings.SplitN(rest, ".", 3)
	if len(parts) != 3 {
		return 0, 0, false
	}
	major, err := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err != nil || err2 != nil {
		return 0, 0, false
	}
	return major, minor, true
}
