package tunnel

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/crypto/ssh"
)

// Environments: a run's CMD may get the environment of a workload's
// container, as the container sees it (plug --env-from). The agent reads
// it from the cluster (EnvResolver, platform.go) and sends it on the
// control channel, to a connection that has said no hello: reading an
// environment opens no run.
//
// CLI to agent: env, naming the workload. Agent to CLI: env_vars at once,
// empty (so that the CLI can tell an agent that does not know the request,
// which says nothing), then env_vars messages carrying the variables, then
// one env_done with what could not be read, or with the error.

const (
	typeEnv     = "env"
	typeEnvVars = "env_vars"
	typeEnvDone = "env_done"
)

// The kinds of workload an EnvRequest names.
const (
	WorkloadPod         = "pod"
	WorkloadDeployment  = "deployment"
	WorkloadStatefulSet = "statefulset"
	WorkloadDaemonSet   = "daemonset"
	WorkloadJob         = "job"
	WorkloadService     = "service" // a Swarm service
)

// workloadKinds are the kinds, in the order messages list them.
var workloadKinds = []string{WorkloadDeployment, WorkloadStatefulSet, WorkloadDaemonSet, WorkloadJob, WorkloadPod, WorkloadService}

// Limits of an environment, which hold on both ends.
const (
	// MaxEnvVars is how many variables an environment carries.
	MaxEnvVars = 4096
	// MaxEnvVar is the longest NAME=VALUE: Linux's limit on one string of
	// a process's environment (MAX_ARG_STRLEN, 128 KiB with its NUL).
	MaxEnvVar = 128<<10 - 1
	// MaxEnvBytes is the size of all of an environment's NAME=VALUE.
	MaxEnvBytes = 1 << 20
	// maxEnvGaps and maxEnvNotes bound what an env_done says.
	maxEnvGaps  = 512
	maxEnvNotes = 16
	// envPiece is the most of a value one entry of env_vars carries; the
	// rest follows in the next entries. Escaped for JSON it stays well
	// under a frame.
	envPiece = 6 << 10
	// envFrameBudget is where env_vars is split into another frame.
	envFrameBudget = 48 << 10
	// envAckWait is how long the CLI waits for the agent's first answer,
	// envWait for the whole environment.
	envAckWait = 5 * time.Second
	envWait    = 90 * time.Second
)

// EnvRequest names the workload whose environment a run imports.
type EnvRequest struct {
	Kind      string // one of the Workload kinds
	Name      string // the workload's name in the agent's namespace or swarm
	Container string // the container; "" for the workload's default one
}

func (r EnvRequest) String() string {
	s := r.Kind + "/" + r.Name
	if r.Container != "" {
		s += ":" + r.Container
	}
	return s
}

// CheckEnvRequest refuses a request that names no workload: an unknown
// kind, or a name or container that no platform allows. Platforms check
// their own rules on top.
func CheckEnvRequest(r EnvRequest) error {
	known := false
	for _, k := range workloadKinds {
		known = known || r.Kind == k
	}
	if !known {
		return fmt.Errorf("%q is not a kind of workload plug imports an environment from (%s)", printable(r.Kind), strings.Join(workloadKinds, ", "))
	}
	if err := checkObjectName(r.Name, 253); err != nil {
		return fmt.Errorf("%s name: %w", r.Kind, err)
	}
	if r.Container != "" {
		if err := checkObjectName(r.Container, 63); err != nil {
			return fmt.Errorf("container name: %w", err)
		}
	}
	return nil
}

// checkObjectName accepts 1 to max letters, digits, '.', '_' and '-',
// starting with a letter or digit: the names of Kubernetes objects and
// containers, and of Swarm services.
func checkObjectName(name string, max int) error {
	if name == "" || len(name) > max {
		return fmt.Errorf("%q must be 1 to %d characters", printable(name), max)
	}
	for i, c := range []byte(name) {
		alnum := isLower(c) || isDigit(c) || c >= 'A' && c <= 'Z'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return fmt.Errorf("%q may hold only letters, digits, '.', '_' and '-', and starts with a letter or digit", printable(name))
		}
	}
	return nil
}

// Env is a workload's environment as its container sees it.
type Env struct {
	// Workload says what the values were read from, e.g.
	// "deployment/web: pod web-5d9c-x2x9q, container app".
	Workload string
	// Vars are the variables, sorted by name, each once.
	Vars []EnvVar
	// LeftOut are variables the container has that Vars lacks, and why.
	LeftOut []EnvGap
	// Notes say what else could not be read, one line each (e.g. the
	// image's own ENV).
	Notes []string
	// Sources are the ConfigMaps and Secrets whose values were read for
	// Vars, each with the keys read, for the audit trail (never a value).
	Sources []EnvSource
}

// EnvSource is a ConfigMap or Secret an environment's values were read
// from, and which of its keys.
type EnvSource struct {
	Kind string   `json:"kind"` // "ConfigMap" or "Secret"
	Name string   `json:"name"`
	Keys []string `json:"keys"` // sorted
}

// EnvVar is one variable. Its value may hold any byte but NUL.
type EnvVar struct {
	Name, Value string
}

// EnvGap is a variable left out of an environment.
type EnvGap struct {
	// Name is the variable; "" when Why names a whole source whose
	// variables are not known, e.g. `every variable of Secret "creds"`.
	Name string
	// Why says where its value comes from and why it was not read.
	Why string
	// Rule is the right that would let the agent read it, e.g.
	// "get secrets"; "" when no right would.
	Rule string
}

// CheckEnv refuses an environment beyond the limits, or with a variable
// no process can have: an empty name, or '=' or NUL in it, or NUL in a
// value. It sorts Vars and refuses a name given twice.
func CheckEnv(e *Env) error {
	if len(e.Vars) > MaxEnvVars {
		return fmt.Errorf("the environment has %d variables, more than plug carries (%d)", len(e.Vars), MaxEnvVars)
	}
	sort.Slice(e.Vars, func(i, j int) bool { return e.Vars[i].Name < e.Vars[j].Name })
	total := 0
	for i, v := range e.Vars {
		if err := checkEnvName(v.Name); err != nil {
			return err
		}
		if i > 0 && e.Vars[i-1].Name == v.Name {
			return fmt.Errorf("the environment has %s twice", printable(v.Name))
		}
		if strings.IndexByte(v.Value, 0) >= 0 {
			return fmt.Errorf("the value of %s holds a NUL byte, which no process environment can", printable(v.Name))
		}
		n := len(v.Name) + 1 + len(v.Value)
		if n > MaxEnvVar {
			return fmt.Errorf("%s is %d bytes with its value, more than a process environment takes (%d)", printable(v.Name), n, MaxEnvVar)
		}
		total += n
	}
	if total > MaxEnvBytes {
		return fmt.Errorf("the environment is %d bytes, more than plug carries (%d)", total, MaxEnvBytes)
	}
	return nil
}

// checkEnvName accepts a variable name a process can have.
func checkEnvName(name string) error {
	if name == "" || strings.ContainsAny(name, "=\x00") {
		return fmt.Errorf("%q is not an environment variable name: it is empty or holds '=' or NUL", printable(name))
	}
	if len(name) > maxShortField {
		return fmt.Errorf("the variable name %s… is longer than %d bytes", printable(name[:32]), maxShortField)
	}
	return nil
}

// envMsg asks for a workload's environment (CLI to agent).
type envMsg struct {
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Container string `json:"container,omitempty"`
}

// envVarsMsg carries variables (agent to CLI). An entry with More is
// continued by the next one, which has the same name.
type envVarsMsg struct {
	Vars []envEntry `json:"vars"`
}

// envEntry is a variable, or a piece of one, on the wire: its value is V,
// or B (base64) when it is not UTF-8 text.
type envEntry struct {
	N    string `json:"n"`
	V    string `json:"v,omitempty"`
	B    string `json:"b,omitempty"`
	More bool   `json:"more,omitempty"`
}

// envDoneMsg ends the answer (agent to CLI).
type envDoneMsg struct {
	Error    string       `json:"error,omitempty"` // why there is no environment
	Workload string       `json:"workload,omitempty"`
	LeftOut  []envGapWire `json:"left_out,omitempty"`
	Notes    []string     `json:"notes,omitempty"`
}

type envGapWire struct {
	Name string `json:"name,omitempty"`
	Why  string `json:"why"`
	Rule string `json:"rule,omitempty"`
}

func decodeEnv(frame []byte) (EnvRequest, error) {
	m, err := readMsg[envMsg](frame, typeEnv)
	if err != nil {
		return EnvRequest{}, err
	}
	r := EnvRequest{Kind: m.Kind, Name: m.Name, Container: m.Container}
	return r, CheckEnvRequest(r)
}

// envFrames are the messages that carry e's variables, each frame within
// budget; a long value is cut into pieces.
func envFrames(e *Env) []envVarsMsg {
	var frames []envVarsMsg
	var cur envVarsMsg
	size := 0
	add := func(en envEntry) {
		b, _ := json.Marshal(en)
		if size+len(b) > envFrameBudget && len(cur.Vars) > 0 {
			frames = append(frames, cur)
			cur, size = envVarsMsg{}, 0
		}
		cur.Vars = append(cur.Vars, en)
		size += len(b) + 1
	}
	for _, v := range e.Vars {
		value := v.Value
		for {
			piece := value[:min(len(value), envPiece)]
			value = value[len(piece):]
			en := envEntry{N: v.Name, More: value != ""}
			if utf8.ValidString(piece) {
				en.V = piece
			} else {
				en.B = base64.StdEncoding.EncodeToString([]byte(piece))
			}
			add(en)
			if value == "" {
				break
			}
		}
	}
	if len(cur.Vars) > 0 {
		frames = append(frames, cur)
	}
	return frames
}

// envDone is e's env_done, cut to fit a frame: the gaps that do not fit
// are counted in a note.
func envDone(e *Env) envDoneMsg {
	m := envDoneMsg{Workload: e.Workload, Notes: e.Notes[:min(len(e.Notes), maxEnvNotes-1)]}
	gaps := e.LeftOut[:min(len(e.LeftOut), maxEnvGaps)]
	for _, g := range gaps {
		m.LeftOut = append(m.LeftOut, envGapWire{Name: g.Name, Why: g.Why, Rule: g.Rule})
	}
	for {
		if f, err := encodeFrame(m); err == nil && len(f) < maxControlFrame-512 {
			break
		}
		m.LeftOut = m.LeftOut[:len(m.LeftOut)*3/4]
	}
	if cut := len(e.LeftOut) - len(m.LeftOut); cut > 0 {
		m.Notes = append(m.Notes, fmt.Sprintf("%d more variables are left out than this list names", cut))
	}
	return m
}

// envAssembler builds an Env from the agent's messages, checking every
// limit as it goes.
type envAssembler struct {
	env     Env
	pending *EnvVar // a variable whose value continues
	size    int
}

// take adds one env_vars message.
func (a *envAssembler) take(frame []byte) error {
	m, err := readMsg[envVarsMsg](frame, typeEnvVars)
	if err != nil {
		return err
	}
	for _, en := range m.Vars {
		value := en.V
		if en.B != "" {
			b, err := base64.StdEncoding.DecodeString(en.B)
			if err != nil {
				return fmt.Errorf("env_vars: the value of %s is not base64", printable(en.N))
			}
			value = string(b)
		}
		if a.pending != nil && a.pending.Name != en.N {
			return fmt.Errorf("env_vars: %s ends before its value does", printable(a.pending.Name))
		}
		if a.pending == nil {
			if err := checkEnvName(en.N); err != nil {
				return err
			}
			if len(a.env.Vars) == MaxEnvVars {
				return fmt.Errorf("the agent sent more than %d variables", MaxEnvVars)
			}
			a.env.Vars = append(a.env.Vars, EnvVar{Name: en.N})
			a.pending = &a.env.Vars[len(a.env.Vars)-1]
			a.size += len(en.N) + 1
		}
		a.size += len(value)
		a.pending.Value += value
		if len(a.pending.Name)+1+len(a.pending.Value) > MaxEnvVar || a.size > MaxEnvBytes {
			return fmt.Errorf("the agent sent an environment beyond plug's limits (%d bytes a variable, %d in all)", MaxEnvVar, MaxEnvBytes)
		}
		if !en.More {
			a.pending = nil
		}
	}
	return nil
}

// finish takes the env_done message and returns the environment.
func (a *envAssembler) finish(frame []byte) (*Env, error) {
	m, err := readMsg[envDoneMsg](frame, typeEnvDone)
	if err != nil {
		return nil, err
	}
	if m.Error != "" {
		if err := checkText(&m.Error); err != nil {
			return nil, fmt.Errorf("env_done: %w", err)
		}
		return nil, &EnvError{Text: m.Error}
	}
	if a.pending != nil {
		return nil, fmt.Errorf("env_done: the value of %s was cut short", printable(a.pending.Name))
	}
	if len(m.LeftOut) > maxEnvGaps || len(m.Notes) > maxEnvNotes {
		return nil, errors.New("env_done: more gaps or notes than plug takes")
	}
	e := &a.env
	if err := checkText(&m.Workload); err != nil {
		return nil, fmt.Errorf("env_done: %w", err)
	}
	e.Workload = m.Workload
	for _, g := range m.LeftOut {
		if err := checkFields("env_done", []*string{&g.Name, &g.Rule}, []*string{&g.Why}); err != nil {
			return nil, err
		}
		e.LeftOut = append(e.LeftOut, EnvGap{Name: g.Name, Why: g.Why, Rule: g.Rule})
	}
	for _, n := range m.Notes {
		if err := checkText(&n); err != nil {
			return nil, fmt.Errorf("env_done: %w", err)
		}
		e.Notes = append(e.Notes, n)
	}
	if err := CheckEnv(e); err != nil {
		return nil, fmt.Errorf("the agent sent an environment plug refuses: %w", err)
	}
	return e, nil
}

// EnvError is an agent's refusal of an environment request: the workload
// does not exist, the container is not one of its own, a right is
// missing. Text says what is wrong and what to do.
type EnvError struct{ Text string }

func (e *EnvError) Error() string { return e.Text }

// FetchEnv connects to the agent as Connect would (the same errors:
// *UnreachableError, *HostKeyError, *AuthError), opens no run, and asks
// for the environment of req's workload. The agent's refusal is an
// *EnvError.
func FetchEnv(ctx context.Context, cfg ClientConfig, req EnvRequest) (*Env, error) {
	if cfg.Addr == "" || cfg.User == "" || cfg.Signer == nil || cfg.HostKey == nil {
		return nil, errors.New("tunnel: a ClientConfig needs Addr, User, Signer and HostKey")
	}
	if err := CheckEnvRequest(req); err != nil {
		return nil, err
	}
	if cfg.Run.Version == "" {
		cfg.Run.Version = Version
	}
	s := &Session{cfg: cfg}
	hctx, cancel := context.WithTimeout(ctx, connectTimeout)
	conn, chans, reqs, abort, err := s.handshake(hctx)
	if err != nil {
		cancel()
		return nil, err
	}
	abort()
	cancel()
	defer conn.Close()
	go rejectChannels(chans)
	go answerRequests(reqs)

	ch, creqs, err := conn.OpenChannel(controlChannelType, nil)
	if err != nil {
		return nil, &UnreachableError{Addr: cfg.Addr, Reason: "the server there is not a plug agent: " + err.Error(), Err: err}
	}
	go ssh.DiscardRequests(creqs)
	c := &controlConn{rw: ch}
	if err := c.send(envMsg{Kind: req.Kind, Name: req.Name, Container: req.Container}); err != nil {
		return nil, unreachable(cfg.Addr, err)
	}
	acked := false
	timer := time.AfterFunc(envAckWait, func() { ch.Close() })
	defer timer.Stop()
	stop := context.AfterFunc(ctx, func() { ch.Close() })
	defer stop()
	var a envAssembler
	for {
		typ, frame, err := c.receive()
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil && !acked:
			return nil, fmt.Errorf("the agent at %s does not answer environment requests: it is older than this plug (plug %s); update the agent", cfg.Addr, cfg.Run.Version)
		case err != nil:
			return nil, fmt.Errorf("the agent at %s stopped answering before the whole environment came (%v)", cfg.Addr, err)
		}
		switch typ {
		case typeEnvVars:
			if !acked {
				acked = true
				timer.Reset(envWait)
			}
			if err := a.take(frame); err != nil {
				return nil, err
			}
		case typeEnvDone:
			return a.finish(frame)
		}
	}
}
