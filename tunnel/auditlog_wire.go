package tunnel

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Searching the audit trail the cluster keeps (auditring.go) is a
// question on the control channel, asked without a hello as who is: the
// CLI sends an audit message with Query; the agent answers with audit
// messages holding the events found, every part but the last with More
// set, or Error. An agent older than the question ignores it, and the CLI
// says so after auditWait.
const typeAudit = "audit"

// auditWait bounds the wait for the answer to an audit search.
const auditWait = 15 * time.Second

type auditMsg struct {
	Query  *AuditQuery  `json:"query,omitempty"`
	Events []AuditEvent `json:"events,omitempty"`
	More   bool         `json:"more,omitempty"`
	Error  string       `json:"error,omitempty"`
}

func (m *auditMsg) check() error {
	if q := m.Query; q != nil {
		if err := checkFields("audit", []*string{&q.Name, &q.User, &q.Key}, nil); err != nil {
			return err
		}
	}
	if err := checkText(&m.Error); err != nil {
		return err
	}
	return checkList("audit", "event", m.Events, maxAuditAnswer, cleanAuditEvent)
}

// cleanAuditEvent makes the strings of an event a peer sent safe to show.
func cleanAuditEvent(e *AuditEvent) error {
	shorts := []*string{&e.Event, &e.Agent, &e.Run, &e.User, &e.Key, &e.Comment, &e.From, &e.Version, &e.Kind,
		&e.Container, &e.Name, &e.Mode, &e.How, &e.By, &e.Image, &e.Previous, &e.Workload}
	for i := range e.Names {
		shorts = append(shorts, &e.Names[i])
	}
	for i := range e.Read {
		shorts = append(shorts, &e.Read[i].Kind, &e.Read[i].Name)
		for j := range e.Read[i].Keys {
			shorts = append(shorts, &e.Read[i].Keys[j])
		}
	}
	return checkFields("audit", shorts, []*string{&e.Filter, &e.Reason})
}

// SearchAudit asks the agent at cfg.Addr for the events of the audit
// trail kept in the cluster that q finds (AuditQuery.Select). Members
// (admission by approval) and admins may; the agent refuses others, and
// says why when it keeps no trail in the cluster.
func SearchAudit(ctx context.Context, cfg ClientConfig, q AuditQuery) ([]AuditEvent, error) {
	c, err := openAgent(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer c.close()
	var events []AuditEvent
	err = askDecoded(c, auditMsg{Query: &q}, typeAudit, auditWait, decodeMsg[auditMsg], func(m auditMsg) (bool, error) {
		switch {
		case m.Error != "":
			return false, errors.New(m.Error)
		case len(events)+len(m.Events) > maxAuditAnswer:
			return false, fmt.Errorf("the agent at %s answers more than %d events", cfg.Addr, maxAuditAnswer)
		}
		events = append(events, m.Events...)
		return m.More, nil
	})
	return events, err
}

// answerAudit answers an audit search: members and admins read the trail
// the platform keeps.
func (dc *devConn) answerAudit(m auditMsg) {
	a := dc.a
	slots, ok := a.Platform.(AuditSlots)
	switch {
	case m.Query == nil:
		dc.sendControl(auditMsg{Error: "an audit search needs a query"})
		return
	case !ok:
		dc.sendControl(auditMsg{Error: "this agent keeps its audit trail in its log only: its platform has no place for it in the cluster"})
		return
	case !a.oversees(dc):
		dc.sendControl(auditMsg{Error: "only members (admission by approval) and admins read the audit trail"})
		return
	}
	ctx, cancel := a.platformContext()
	defer cancel()
	trail, err := ReadAuditTrail(ctx, slots)
	if err != nil {
		dc.sendControl(auditMsg{Error: fmt.Sprintf("the agent cannot read the audit trail in the cluster: %v", err)})
		return
	}
	dc.logf("audit searched by %s (%s) from %s", dc.user, dc.fingerprint, dc.conn.RemoteAddr())
	sendParts(m.Query.Select(trail), func(part []AuditEvent, more bool) {
		dc.sendControl(auditMsg{Events: part, More: more})
	})
}
