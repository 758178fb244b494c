package tunnel

import (
	"context"
	"encoding/json"
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
}

// statusRight is a Right in a status message.
type statusRight struct {
	Rule     string `json:"rule"`
	Feature  string `json:"feature"`
	Required bool   `json:"required"`
	Granted  bool   `json:"granted"`
	Fix      string `json:"fix,omitempty"`
}

func (statusMsg) controlType() string { return typeStatus }

func decodeStatus(frame []byte) (statusMsg, error) {
	var m statusMsg
	if err := json.Unmarshal(frame, &m); err != nil {
		return m, fmt.Errorf("malformed status: %w", err)
	}
	if len(m.Rights) > maxStatusRights {
		return m, fmt.Errorf("status: %d rights, more than %d", len(m.Rights), maxStatusRights)
	}
	if len(m.Rights) == 0 {
		m.Rights = nil
	}
	for _, f := range []*string{&m.Version, &m.Agent, &m.Platform} {
		if err := checkShort(f); err != nil {
			return m, fmt.Errorf("status: %w", err)
		}
	}
	for _, f := range []*string{&m.Refusing, &m.RightsError} {
		if err := checkText(f); err != nil {
			return m, fmt.Errorf("status: %w", err)
		}
	}
	for i := range m.Rights {
		r := &m.Rights[i]
		for _, f := range []*string{&r.Rule, &r.Feature, &r.Fix} {
			if err := checkText(f); err != nil {
				return m, fmt.Errorf("status: right %d: %w", i, err)
			}
		}
	}
	return m, nil
}

// answerStatus answers a status request with the agent's rights, checked
// afresh: a check that finds them sufficient lets an agent that refused
// runs serve them at once.
func (dc *devConn) answerStatus() {
	a := dc.a
	rights, err := a.checkRights(a.ctx)
	m := statusMsg{Version: Version, Agent: a.ID, Platform: a.platformName(), Refusing: a.refusal()}
	if err != nil {
		m.RightsError = err.Error()
	}
	for _, r := range rights[:min(len(rights), maxStatusRights)] {
		m.Rights = append(m.Rights, statusRight{Rule: r.Rule, Feature: r.Feature, Required: r.Required, Granted: r.Granted, Fix: r.Fix})
	}
	a.logf("status asked by %s (%s) from %s", dc.conn.User(), dc.fingerprint, dc.conn.RemoteAddr())
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
	if cfg.Addr == "" || cfg.User == "" || cfg.Signer == nil || cfg.HostKey == nil {
		return nil, errors.New("tunnel: a ClientConfig needs Addr, User, Signer and HostKey")
	}
	if cfg.Run.Version == "" {
		cfg.Run.Version = Version
	}
	s := &Session{cfg: cfg}
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	start := time.Now()
	conn, chans, reqs, abort, err := s.handshake(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	defer abort()
	d := &Diagnosis{AgentVersion: agentVersion(string(conn.ServerVersion())), Handshake: time.Since(start)}
	go rejectChannels(chans)
	go answerRequests(reqs)

	ch, creqs, err := conn.OpenChannel(controlChannelType, nil)
	if err != nil {
		return nil, &UnreachableError{Addr: cfg.Addr, Reason: "the server there is not a plug agent: " + err.Error(), Err: err}
	}
	go ssh.DiscardRequests(creqs)
	wait := time.AfterFunc(statusWait, func() { ch.Close() })
	defer wait.Stop()
	c := &controlConn{rw: ch}
	if err := c.send(statusMsg{}); err != nil {
		return d, nil
	}
	for {
		typ, frame, err := c.receive()
		if err != nil {
			return d, nil // no answer: an agent older than the status request
		}
		if typ != typeStatus {
			continue
		}
		m, err := decodeStatus(frame)
		if err != nil {
			return nil, fmt.Errorf("the agent at %s sent a status plug cannot read: %w", cfg.Addr, err)
		}
		st := &AgentStatus{Version: m.Version, Agent: m.Agent, Platform: m.Platform, Refusing: m.Refusing, RightsError: m.RightsError}
		for _, r := range m.Rights {
			st.Rights = append(st.Rights, Right{Rule: r.Rule, Feature: r.Feature, Required: r.Required, Granted: r.Granted, Fix: r.Fix})
		}
		d.Status = st
		return d, nil
	}
}

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
// together, and why. Releases (vMAJOR.MINOR.PATCH, as build.sh stamps them
// from a tag) are compatible within a major version: the control protocol
// only gains messages, which the older side ignores. Builds that are not
// releases are judged by the protocol alone: an agent that answered a
// status request speaks it.
func Compatible(cli, agent string) (bool, string) {
	if cli == agent {
		return true, "the same plug " + cli + " on both ends"
	}
	cm, cok := majorVersion(cli)
	am, aok := majorVersion(agent)
	switch {
	case cok && aok && cm == am:
		return true, fmt.Sprintf("CLI %s and agent %s: compatible (same major version)", cli, agent)
	case cok && aok:
		older := "the agent (re-apply its manifest with the newer image)"
		if cm < am {
			older = "this CLI (plug update)"
		}
		return false, fmt.Sprintf("CLI %s and agent %s: different major versions; update %s", cli, agent, older)
	}
	return true, fmt.Sprintf("CLI %s and agent %s: not releases; the agent speaks plug's control protocol", cli, agent)
}

// majorVersion reads MAJOR of "vMAJOR.MINOR.PATCH[-suffix]".
func majorVersion(v string) (int, bool) {
	rest, ok := strings.CutPrefix(v, "v")
	if !ok {
		return 0, false
	}
	parts := strings.SplitN(rest, ".", 3)
	if len(parts) != 3 {
		return 0, false
	}
	major, err := strconv.Atoi(parts[0])
	if _, err2 := strconv.Atoi(parts[1]); err != nil || err2 != nil {
		return 0, false
	}
	return major, true
}
