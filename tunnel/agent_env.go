package tunnel

import (
	"context"
	"errors"
	"fmt"
	"time"
)

const (
	// maxEnvRequests bounds the environments an agent reads at once; more
	// requests wait for one to finish.
	maxEnvRequests = 4
	// envTimeout bounds the reading of one environment.
	envTimeout = 60 * time.Second
)

// answerEnv answers an env request: an empty env_vars at once, then the
// environment and env_done. It runs on the connection's control reader,
// so a connection reads one environment at a time. Values are never
// logged: the log says which workload, who asked and how many variables.
func (dc *devConn) answerEnv(frame []byte) {
	a := dc.a
	dc.sendControl(envVarsMsg{Vars: []envEntry{}})
	fail := func(text string) { dc.sendControl(envDoneMsg{Error: text}) }
	req, err := decodeEnv(frame)
	if err != nil {
		fail(err.Error())
		return
	}
	resolver, ok := a.Platform.(EnvResolver)
	if !ok {
		fail(fmt.Sprintf("this agent (%s) cannot read workloads' environments", a.platformName()))
		return
	}
	ctx, cancel := untilClosed(a.ctx, envTimeout, dc.gone)
	defer cancel()
	select {
	case a.envSlots <- struct{}{}:
		defer func() { <-a.envSlots }()
	case <-ctx.Done():
		countCap("env_reads_at_once")
		fail(fmt.Sprintf("the agent is reading %d other environments and did not get to this one within %s; try again", maxEnvRequests, envTimeout))
		return
	}
	env, err := resolver.Env(ctx, req)
	if err == nil {
		err = sanitizeEnv(env)
	}
	if err == nil {
		err = a.openEnvRefusal(dc.fingerprint, env)
	}
	who := fmt.Sprintf("%s (%s)", dc.user, dc.fingerprint)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("reading the environment of %s took longer than %s", req, envTimeout)
		}
		dc.logf("environment of %s for %s: refused: %v", req, who, err)
		fail(err.Error())
		return
	}
	for _, f := range envFrames(env) {
		dc.sendControl(f)
	}
	dc.sendControl(envDone(env))
	a.audit(AuditEvent{Event: AuditEnvRead, User: dc.user, Key: dc.fingerprint, From: addrString(dc.conn.RemoteAddr()),
		Workload: env.Workload, Read: env.Sources})
	dc.logf("environment of %s for %s: %d variables, %d left out", req, who, len(env.Vars), len(env.LeftOut))
}

// sanitizeEnv moves the variables no process can have to LeftOut, and
// checks the limits.
func sanitizeEnv(e *Env) error {
	kept := e.Vars[:0]
	for _, v := range e.Vars {
		why := ""
		switch {
		case checkEnvName(v.Name) != nil:
			why = "its name is not one plug passes on (empty, with '=' or NUL, or longer than 256 bytes)"
		case len(v.Name)+1+len(v.Value) > MaxEnvVar:
			why = fmt.Sprintf("it is longer than a process environment takes (%d bytes)", MaxEnvVar)
		default:
			for i := 0; i < len(v.Value); i++ {
				if v.Value[i] == 0 {
					why = "its value holds a NUL byte, which no process environment can"
					break
				}
			}
		}
		if why != "" {
			e.LeftOut = append(e.LeftOut, EnvGap{Name: printable(v.Name[:min(len(v.Name), maxShortField)]), Why: why})
			continue
		}
		kept = append(kept, v)
	}
	e.Vars = kept
	return CheckEnv(e)
}
