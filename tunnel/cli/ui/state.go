package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"time"

	"plug/tunnel"
)

// How often the page's state is read from the agent while a page is
// open: who is plugged in, the members, and the agent's status (which
// checks its rights in the cluster afresh, so less often).
const (
	whoEvery     = time.Second
	membersEvery = 2 * time.Second
	statusEvery  = 30 * time.Second
	askTimeout   = 20 * time.Second
)

// state is what the page shows, sent whole at each change.
type state struct {
	Info    Info      `json:"info"`
	Install []install `json:"install"`

	Agent      *agentState `json:"agent,omitempty"`
	AgentError string      `json:"agent_error,omitempty"`

	Runs      []tunnel.Plugged `json:"runs"`
	All       bool             `json:"all"` // Runs are everyone's, not only the key's own
	RunsError string           `json:"runs_error,omitempty"`

	Members      *tunnel.MemberList `json:"members,omitempty"`
	MembersError string             `json:"members_error,omitempty"`
}

// agentState is the agent's answer to the status request.
type agentState struct {
	Version     string         `json:"version"`
	Platform    string         `json:"platform"`
	Admission   string         `json:"admission"`
	Refusing    string         `json:"refusing,omitempty"`
	RightsError string         `json:"rights_error,omitempty"`
	Rights      []tunnel.Right `json:"rights"`
}

// hub reads the state from the agent while pages are open, and sends it
// to each at every change.
type hub struct {
	s    *Server
	poke chan struct{} // read again now: a change was made

	mu    sync.Mutex
	subs  map[chan []byte]bool
	last  []byte // the last state sent
	state state
}

func newHub(s *Server) *hub {
	st := state{Info: s.info, Install: installs(s.info), Runs: []tunnel.Plugged{}}
	return &hub{s: s, poke: make(chan struct{}, 1), subs: map[chan []byte]bool{}, state: st}
}

// subscribe returns a channel of the states to send to one page, the
// current one first, and its cancel.
func (h *hub) subscribe() (<-chan []byte, func()) {
	ch := make(chan []byte, 1)
	h.mu.Lock()
	h.subs[ch] = true
	if h.last != nil {
		ch <- h.last
	}
	h.mu.Unlock()
	h.refresh()
	return ch, func() {
		h.mu.Lock()
		delete(h.subs, ch)
		h.mu.Unlock()
	}
}

// refresh asks for the state to be read again now.
func (h *hub) refresh() {
	select {
	case h.poke <- struct{}{}:
	default:
	}
}

// watched says whether a page is open.
func (h *hub) watched() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs) > 0
}

// run reads the state while a page is open, until ctx ends.
func (h *hub) run(ctx context.Context) {
	t := time.NewTicker(whoEvery)
	defer t.Stop()
	var lastStatus, lastMembers time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-h.poke:
			lastMembers = time.Time{}
		}
		if !h.watched() {
			continue
		}
		if time.Since(lastStatus) >= statusEvery {
			h.readStatus(ctx)
			lastStatus = time.Now()
		}
		h.readWho(ctx)
		if time.Since(lastMembers) >= membersEvery {
			h.readMembers(ctx)
			lastMembers = time.Now()
		}
		h.send()
	}
}

func (h *hub) readStatus(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	d, err := h.s.agent.Status(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err != nil:
		h.state.Agent, h.state.AgentError = nil, err.Error()
	case d.Status == nil:
		h.state.Agent, h.state.AgentError = &agentState{Version: d.AgentVersion}, "the agent is older than its status request: update it"
	default:
		st := d.Status
		h.state.AgentError = ""
		h.state.Agent = &agentState{Version: st.Version, Platform: st.Platform, Admission: st.Admission,
			Refusing: st.Refusing, RightsError: st.RightsError, Rights: st.Rights}
	}
}

func (h *hub) readWho(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	runs, all, err := h.s.agent.Who(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.state.RunsError = err.Error()
		return
	}
	if runs == nil {
		runs = []tunnel.Plugged{}
	}
	h.state.Runs, h.state.All, h.state.RunsError = runs, all, ""
}

// readMembers reads the members when the agent admits by approval, or
// does not say (an agent older than the field): its refusal then means
// open admission, and the page shows no people.
func (h *hub) readMembers(ctx context.Context) {
	h.mu.Lock()
	admission, known := "", h.state.Agent != nil
	if known {
		admission = h.state.Agent.Admission
	}
	h.mu.Unlock()
	if !known || admission == tunnel.AdmissionOpen {
		h.setMembers(nil, "")
		return
	}
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	l, _, err := h.s.agent.Members(ctx, "list", "", "")
	switch {
	case err == nil:
		h.setMembers(&l, "")
	case admission == tunnel.AdmissionInvite:
		h.setMembers(nil, err.Error())
	default:
		h.setMembers(nil, "")
	}
}

// setMembers sets the members of the state, or why they are unknown.
func (h *hub) setMembers(l *tunnel.MemberList, why string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.state.Members, h.state.MembersError = l, why
}

// send sends the state to every page when it changed.
func (h *hub) send() {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, err := json.Marshal(h.state)
	if err != nil || bytes.Equal(b, h.last) {
		return
	}
	h.last = b
	for ch := range h.subs {
		select {
		case <-ch: // a page that has not read the last one gets this one
		default:
		}
		ch <- b
	}
}
