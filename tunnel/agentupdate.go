package tunnel

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"
)

// plug update --agent is a question on the control channel, asked without
// a hello as who is (who.go): the CLI sends an agent_update message with
// Image and Wait; the agent answers with agent_update messages, each with
// Progress (a line for the terminal) until the last, which has Done set
// and says what was rolled out (AgentRollout's fields) or, with Error, why
// it was refused (nothing changed). Only a key that oversees the agent
// (Keys.Oversees) may ask; the agent performs the change through its
// Platform (AgentUpdater), with its own rights in the cluster, so that the
// developer needs no cluster credentials.
const typeAgentUpdate = "agent_update"

// How long the new agent pods may take to be ready.
const (
	// DefaultUpdateWait is the wait when the CLI does not say.
	DefaultUpdateWait = 3 * time.Minute
	// MinUpdateWait and MaxUpdateWait bound the wait a peer may ask for:
	// the agent spends one API request a second on it, at most
	// 2×MaxUpdateWait (the rollout, and its undo).
	MinUpdateWait = 10 * time.Second
	MaxUpdateWait = 15 * time.Minute
)

const (
	// updateDrain is how long a stopping agent waits for the answer of an
	// update in progress: the old agent is stopped by the very rollout it
	// follows, once the new one is ready.
	updateDrain = 20 * time.Second
	// updateFirstAnswer is how long the CLI waits for the agent's first
	// answer.
	updateFirstAnswer = 10 * time.Second
	// maxUpdatePods bounds the pods an answer names.
	maxUpdatePods = 64
)

type agentUpdateMsg struct {
	Image string `json:"image,omitempty"` // CLI to agent
	Wait  int    `json:"wait,omitempty"`  // seconds; CLI to agent

	Agent    string `json:"agent,omitempty"` // the agent answering
	Progress string `json:"progress,omitempty"`
	Done     bool   `json:"done,omitempty"`
	Error    string `json:"error,omitempty"` // refused: nothing changed

	Workload   string   `json:"workload,omitempty"`
	From       string   `json:"from,omitempty"`
	To         string   `json:"to,omitempty"`
	Pods       []string `json:"pods,omitempty"`
	Failed     string   `json:"failed,omitempty"`
	UndoFailed string   `json:"undo_failed,omitempty"`
}

func (m *agentUpdateMsg) check() error {
	if err := checkList("agent_update", "pod", m.Pods, maxUpdatePods, checkShort); err != nil {
		return err
	}
	return checkFields("agent_update", []*string{&m.Agent, &m.Workload, &m.From, &m.To}, []*string{&m.Image, &m.Progress, &m.Error, &m.Failed, &m.UndoFailed})
}

// maxImageRef is the longest image reference CheckImage accepts.
const maxImageRef = 512

// imageRef is the grammar of an image reference (as the container
// runtimes read one): [DOMAIN[:PORT]/]PATH[:TAG][@DIGEST], where PATH is
// lower-case components separated by '/', each alphanumerics joined by
// '.', '_', '__' or dashes; TAG is up to 128 word characters, '.' and '-',
// not beginning with either; DIGEST is ALGORITHM:HEX.
var imageRef = regexp.MustCompile(`^` +
	`(?:(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?/)?` +
	`[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*` +
	`(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?` +
	`(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$`)

// CheckImage accepts an image reference (registry.example.com/plug:2.31.0,
// plug:dev, plug@sha256:…) and refuses anything else with an error saying
// what is wrong: the agent checks a peer's image with it before the image
// reaches an API object.
func CheckImage(image string) error {
	switch {
	case image == "":
		return errors.New("no image given: name one, e.g. --agent registry.example.com/plug:2.31.0")
	case len(image) > maxImageRef:
		return fmt.Errorf("the image reference is %d bytes, more than %d", len(image), maxImageRef)
	case !imageRef.MatchString(image):
		return fmt.Errorf("%q is not an image reference: give [REGISTRY[:PORT]/]NAME[:TAG][@sha256:DIGEST], the name in lower case, e.g. registry.example.com/plug:2.31.0", PeerText(image))
	}
	return nil
}

// updateWait is the wait a peer asked for, in seconds, within the bounds.
func updateWait(seconds int) time.Duration {
	if seconds <= 0 {
		return DefaultUpdateWait
	}
	return min(max(time.Duration(seconds)*time.Second, MinUpdateWait), MaxUpdateWait)
}

// updates are the agent updates in progress on an agent: one at a time.
type updates struct {
	one sync.Mutex
	wg  sync.WaitGroup
}

// drain waits for the answer of an update in progress, up to updateDrain.
func (u *updates) drain() {
	done := make(chan struct{})
	go func() {
		u.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(updateDrain):
	}
}

// answerAgentUpdate answers plug update --agent: for a key that oversees
// the agent, the platform moves the agent's workload to the image asked
// for and follows the rollout, undoing it when it fails; each step is told
// to the CLI, and the request and its outcome are audited.
func (dc *devConn) answerAgentUpdate(m agentUpdateMsg) {
	a := dc.a
	by := fmt.Sprintf("%s (%s)", dc.user, dc.fingerprint)
	e := AuditEvent{User: dc.user, Key: dc.fingerprint, From: addrString(dc.conn.RemoteAddr()), By: by, Image: PeerText(m.Image)}
	refuse := func(format string, args ...any) {
		why := fmt.Sprintf(format, args...)
		e.Event, e.Reason = AuditAgentUpdateRefused, why
		a.audit(e)
		dc.sendControl(agentUpdateMsg{Agent: a.ID, Done: true, Error: why})
	}
	up, ok := a.Platform.(AgentUpdater)
	switch {
	case !a.oversees(dc):
		refuse("only a key that oversees this agent moves its image (with admission by approval a member, with open admission an admin the operator named: deploy/README.md, Who may do what); nothing was changed")
		return
	case !ok:
		refuse("the agent on %s cannot move its own image; move it the way it was deployed, then plug doctor names the rights the new agent lacks; nothing was changed", a.platformName())
		return
	}
	if err := CheckImage(m.Image); err != nil {
		refuse("%v; nothing was changed", err)
		return
	}
	if !a.updates.one.TryLock() {
		refuse("another plug update --agent is in progress on this agent; wait for it to end; nothing was changed")
		return
	}
	defer a.updates.one.Unlock()
	a.updates.wg.Add(1)
	defer a.updates.wg.Done()

	wait := updateWait(m.Wait)
	e.Event = AuditAgentUpdate
	a.audit(e)
	a.logf("%s asked from %s to move the agent to image %s", by, dc.conn.RemoteAddr(), PeerText(m.Image))
	// The rollout goes on when the CLI leaves, and while this agent stops:
	// a failed one must be undone all the same.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), 2*wait+time.Minute)
	defer cancel()
	progress := func(line string) {
		dc.sendControl(agentUpdateMsg{Agent: a.ID, Progress: line})
	}
	progress(fmt.Sprintf("agent %s moves itself to image %s", a.ID, PeerText(m.Image)))
	r, err := up.UpdateAgent(ctx, AgentUpdateRequest{Image: m.Image, By: by, Wait: wait}, progress)
	if err != nil {
		refuse("%v; nothing was changed", err)
		return
	}
	e.Previous = r.From
	switch {
	case r.Failed != "":
		e.Event, e.Reason = AuditAgentUpdateFailed, r.Failed
		if r.UndoFailed != "" {
			e.Reason += "; the undo failed: " + r.UndoFailed
		}
		if r.UndoFailed != "" {
			a.logf("the move to image %s failed (%s), and so did its undo: %s", PeerText(m.Image), r.Failed, r.UndoFailed)
		} else {
			a.logf("the move to image %s failed (%s); image %s is back", PeerText(m.Image), r.Failed, r.From)
		}
	default:
		e.Event = AuditAgentUpdated
		a.logf("%s runs image %s (was %s)", r.Workload, r.To, r.From)
	}
	a.audit(e)
	dc.sendControl(agentUpdateMsg{Agent: a.ID, Done: true, Workload: r.Workload, From: r.From, To: r.To,
		Pods: r.Pods[:min(len(r.Pods), maxUpdatePods)], Failed: r.Failed, UndoFailed: r.UndoFailed})
}

// AgentUpdate is the answer to UpdateAgent.
type AgentUpdate struct {
	AgentRollout
	// Agent is the agent instance that carried it out.
	Agent string
}

// UpdateLostError is an UpdateAgent whose agent stopped answering after
// it began: the rollout may have gone either way (an old agent is stopped
// once the new one is ready). Agent is the instance that began it.
type UpdateLostError struct {
	Agent string
	Err   error
}

func (e *UpdateLostError) Error() string {
	return fmt.Sprintf("agent %s stopped answering during the rollout (its connection ended)", e.Agent)
}

func (e *UpdateLostError) Unwrap() error { return e.Err }

// UpdateAgent asks the agent at cfg.Addr to move its own workload to
// image, waiting up to wait (DefaultUpdateWait when 0) for the new pods to
// be ready, and passes each line of progress the agent tells. A refusal
// (the key does not oversee the agent, the image is no reference, the
// platform cannot) is an error and nothing changed; a rollout that failed
// and was undone is an AgentUpdate with Failed set. When the agent stops
// answering once it began, the error is an *UpdateLostError. It connects
// as Connect would, with the same errors, and opens no run.
func UpdateAgent(ctx context.Context, cfg ClientConfig, image string, wait time.Duration, progress func(string)) (AgentUpdate, error) {
	if err := CheckImage(image); err != nil {
		return AgentUpdate{}, err
	}
	if wait == 0 {
		wait = DefaultUpdateWait
	}
	if wait < MinUpdateWait || wait > MaxUpdateWait {
		return AgentUpdate{}, fmt.Errorf("the wait %s is not between %s and %s", wait, MinUpdateWait, MaxUpdateWait)
	}
	q, err := openAgent(ctx, cfg)
	if err != nil {
		return AgentUpdate{}, err
	}
	defer q.close()
	var out AgentUpdate
	began, answered := false, false
	// An agent older than the question ignores it; a newer one answers at
	// once (a refusal, or the first step).
	older := time.AfterFunc(updateFirstAnswer, q.close)
	defer older.Stop()
	err = q.ask(agentUpdateMsg{Image: image, Wait: int(wait / time.Second)}, typeAgentUpdate, 2*wait+2*time.Minute, func(frame []byte) (bool, error) {
		older.Stop()
		m, err := decodeMsg[agentUpdateMsg](frame)
		answered = err != nil || m.Error != "" || m.Done
		switch {
		case err != nil:
			return false, fmt.Errorf("the agent at %s sent an answer plug cannot read: %w", cfg.Addr, err)
		case m.Error != "":
			return false, errors.New(m.Error)
		}
		out.Agent = m.Agent
		if !m.Done {
			began = true
			if progress != nil {
				progress(m.Progress)
			}
			return true, nil
		}
		out.AgentRollout = AgentRollout{Workload: m.Workload, From: m.From, To: m.To, Pods: m.Pods, Failed: m.Failed, UndoFailed: m.UndoFailed}
		return false, nil
	})
	switch {
	case err != nil && began && !answered:
		return out, &UpdateLostError{Agent: out.Agent, Err: err}
	case err != nil && !began && !answered:
		return out, fmt.Errorf("the agent at %s did not answer within %s: an agent older than this plug does not know plug update --agent; move it the way it was deployed (kubectl -n NAMESPACE set image deployment/plug plug=%s)", cfg.Addr, updateFirstAnswer, image)
	}
	return out, err
}
