package tunnel

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Who is plugged in, and ending a run, are questions asked on the control
// channel without a hello, as the status is (status.go): the CLI sends a
// who message with no fields, and the agent answers with a who message
// listing the runs of every replica, one per run (Plugged); or the CLI
// sends an end message naming a run and a reason, and the agent answers
// with an end message naming the run it ended. An answer with Error set is
// a refusal, which says what to do.
const (
	typeWho = "who"
	typeEnd = "end"

	// whoWait bounds the wait for an answer to who or end.
	whoWait = 30 * time.Second
	// maxWhoRuns bounds the runs of a who answer.
	maxWhoRuns = 2000
	// maxReason bounds the reason of plug end.
	maxReason = 512
	// minRunPrefix is the shortest part of a run id plug end takes.
	minRunPrefix = 6
)

// Plugged is one run as plug who shows it: the records of every agent
// replica holding a connection of it (RunRecord), merged into one.
type Plugged struct {
	Run  string `json:"run"`
	User string `json:"user"`
	// UserAsserted says User is only what the client asserted (open
	// admission): Key is the identity.
	UserAsserted bool     `json:"user_asserted,omitempty"`
	Key          string   `json:"key"`
	Comment      string   `json:"comment,omitempty"`
	From         []string `json:"from"`              // the addresses of its connections
	Version      string   `json:"version,omitempty"` // "" for OpenSSH
	Kind         string   `json:"kind"`              // KindServes, KindConsumes, KindOpenSSH
	// Container is ContainerDockerrun for a run of plug --dockerrun.
	Container string       `json:"container,omitempty"`
	Since     time.Time    `json:"since"`
	Agents    []string     `json:"agents"` // the replicas holding it
	Away      bool         `json:"away,omitempty"`
	Names     []RecordName `json:"names,omitempty"`
}

// What says what the run is: "serving", "nothing served yet" (a plug -s
// that has not served its name yet) or "client only".
func (p Plugged) What() string {
	switch {
	case len(p.Names) > 0:
		return "serving"
	case p.Kind == KindServes:
		return "nothing served yet"
	}
	return "client only"
}

// mergeRuns makes one Plugged of the records of each run (an id and the
// key that opened it), ordered by when they began.
func mergeRuns(recs []RunRecord) []Plugged {
	type runKey struct{ run, key string } // a run is its id and its key
	byRun := map[runKey]*Plugged{}
	var order []*Plugged
	for _, rec := range recs {
		p := byRun[runKey{rec.Run, rec.Key}]
		if p == nil {
			p = &Plugged{Run: rec.Run, User: rec.User, Key: rec.Key, Kind: rec.Kind, Container: rec.Container, Since: rec.Since, Away: true}
			byRun[runKey{rec.Run, rec.Key}] = p
			order = append(order, p)
		}
		if rec.Since.Before(p.Since) {
			p.Since = rec.Since
		}
		if p.Comment == "" {
			p.Comment = rec.Comment
		}
		if p.Version == "" {
			p.Version = rec.Version
		}
		if p.Container == "" {
			p.Container = rec.Container
		}
		if !rec.Away {
			p.Away = false
			if !slices.Contains(p.From, rec.From) {
				p.From = append(p.From, rec.From)
			}
		}
		p.Agents = append(p.Agents, rec.Agent)
		for _, n := range rec.Names {
			i := slices.IndexFunc(p.Names, func(m RecordName) bool { return m.Name == n.Name && m.Port == n.Port })
			if i < 0 {
				p.Names = append(p.Names, n)
			} else if !rec.Away {
				p.Names[i] = n // the live connection's word wins
			}
		}
	}
	out := make([]Plugged, 0, len(order))
	for _, p := range order {
		slices.Sort(p.Agents)
		p.Agents = slices.Compact(p.Agents)
		if len(p.From) == 0 {
			for _, rec := range recs {
				if rec.Run == p.Run && rec.Key == p.Key && !slices.Contains(p.From, rec.From) {
					p.From = append(p.From, rec.From) // where it was when it dropped
				}
			}
		}
		slices.SortFunc(p.Names, func(x, y RecordName) int { return strings.Compare(x.Name, y.Name) })
		out = append(out, *p)
	}
	slices.SortFunc(out, func(x, y Plugged) int { return x.Since.Compare(y.Since) })
	return out
}

// whoMsg asks who is plugged in (CLI to agent, no fields) and answers it,
// in as many parts as a control message's size needs: every part but the
// last has More set.
type whoMsg struct {
	Runs []Plugged `json:"runs,omitempty"`
	// All says the answer holds every key's runs; else only the caller's.
	All   bool   `json:"all,omitempty"`
	More  bool   `json:"more,omitempty"`
	Error string `json:"error,omitempty"`
}

// endMsg asks the agent to end a run (CLI to agent: Run, a whole id or its
// beginning, and Reason), and answers it (Ended: the run's whole id, and
// whose it was).
type endMsg struct {
	Run    string `json:"run,omitempty"`
	Reason string `json:"reason,omitempty"`
	Ended  string `json:"ended,omitempty"`
	User   string `json:"user,omitempty"`
	Key    string `json:"key,omitempty"`
	Error  string `json:"error,omitempty"`
}

func (m *whoMsg) check() error {
	if err := checkList("who", "run", m.Runs, maxWhoRuns, cleanPlugged); err != nil {
		return err
	}
	return checkText(&m.Error)
}

// cleanPlugged checks a run a peer described, and makes its strings safe
// for a terminal.
func cleanPlugged(p *Plugged) error {
	if err := checkRunID(p.Run); err != nil {
		return err
	}
	fields := []*string{&p.User, &p.Key, &p.Comment, &p.Version, &p.Kind, &p.Container}
	for i := range p.From {
		fields = append(fields, &p.From[i])
	}
	for i := range p.Agents {
		fields = append(fields, &p.Agents[i])
	}
	for i := range p.Names {
		fields = append(fields, &p.Names[i].Name, &p.Names[i].Mode)
	}
	for _, f := range fields {
		if err := checkShort(f); err != nil {
			return err
		}
	}
	for i := range p.Names {
		if err := checkText(&p.Names[i].Filter); err != nil {
			return err
		}
	}
	return nil
}

func (m *endMsg) check() error {
	return checkFields("end", []*string{&m.Run, &m.Ended, &m.User, &m.Key}, []*string{&m.Reason, &m.Error})
}

// Who asks the agent at cfg.Addr who is plugged in: every replica's runs,
// one Plugged each, or only those of cfg's key when the key may not see
// the others (all is false then). It connects as Connect would, with the
// same errors, and opens no run.
func Who(ctx context.Context, cfg ClientConfig) (runs []Plugged, all bool, err error) {
	q, err := openAgent(ctx, cfg)
	if err != nil {
		return nil, false, err
	}
	defer q.close()
	err = askDecoded(q, whoMsg{}, typeWho, whoWait, decodeMsg[whoMsg], func(m whoMsg) (bool, error) {
		switch {
		case m.Error != "":
			return false, errors.New(m.Error)
		case len(runs)+len(m.Runs) > maxWhoRuns:
			return false, fmt.Errorf("the agent at %s lists more than %d runs", cfg.Addr, maxWhoRuns)
		}
		runs, all = append(runs, m.Runs...), m.All
		return m.More, nil
	})
	if err != nil {
		return nil, false, err
	}
	return runs, all, nil
}

// Ended is what End did.
type Ended struct {
	Run  string // the run's whole id
	User string // whose it was
	Key  string
}

// End asks the agent at cfg.Addr to end run (its whole id, or a beginning
// of it that names one run), for reason: the developer's CMD is stopped,
// their terminal shows who ended it (cfg's user and key) and why, and
// every replica holding a connection of it gives its names back. A new
// run of the same key is let in afterwards.
func End(ctx context.Context, cfg ClientConfig, run, reason string) (Ended, error) {
	if err := checkEndArgs(run, reason); err != nil {
		return Ended{}, err
	}
	q, err := openAgent(ctx, cfg)
	if err != nil {
		return Ended{}, err
	}
	defer q.close()
	var m endMsg
	err = askDecoded(q, endMsg{Run: run, Reason: reason}, typeEnd, whoWait, decodeMsg[endMsg], func(a endMsg) (bool, error) {
		m = a
		return false, nil
	})
	switch {
	case err != nil:
		return Ended{}, err
	case m.Error != "":
		return Ended{}, errors.New(m.Error)
	}
	return Ended{Run: m.Ended, User: m.User, Key: m.Key}, nil
}

// checkEndArgs refuses what no agent would take: a run id that cannot be
// one, or a reason that is missing, too long or not one line.
func checkEndArgs(run, reason string) error {
	if len(run) < minRunPrefix {
		return fmt.Errorf("the run %q is too short: give at least %d characters of its id, as plug who shows it", run, minRunPrefix)
	}
	if err := checkRunID(run); err != nil {
		return err
	}
	switch {
	case strings.TrimSpace(reason) == "":
		return errors.New("a reason is required: the developer reads it in their terminal (--reason TEXT)")
	case len(reason) > maxReason:
		return fmt.Errorf("the reason is %d bytes, more than %d", len(reason), maxReason)
	case strings.ContainsFunc(reason, func(r rune) bool { return r < ' ' || r == 0x7f }):
		return errors.New("the reason must be one line of text, without control characters")
	}
	return nil
}
