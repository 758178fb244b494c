package tunnel

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Volumes: a run may have a workload's volume served to it over SMB (plug
// --volume). The agent asks its Platform (VolumeServer, platform.go) for a
// helper that serves the volume as the workload's uid, behind a cluster
// name on port 445; the run reaches that name through the agent like any
// other (direct-tcpip), and the helper is removed when the run ends, with
// its names.
//
// CLI to agent, on the control channel of a run (after hello): volume,
// naming the workload, the volume and an id the CLI chose. Agent to CLI:
// volume_ready with the same id, once the helper answers, or with the
// error.

const (
	typeVolume      = "volume"
	typeVolumeReady = "volume_ready"
)

const (
	// MaxRunVolumes is how many volumes one run may have served at once.
	MaxRunVolumes = 4
	// volumeTimeout bounds the making of one helper, from the request to
	// the helper answering; volumeWait is how long the CLI waits.
	volumeTimeout = 2 * time.Minute
	volumeWait    = volumeTimeout + 15*time.Second
	// volumeNameWait bounds the wait for the helper's name to be one of
	// the cluster's names the run may dial.
	volumeNameWait = 15 * time.Second
)

// VolumeRequest names the volume of a workload that a run asks for.
type VolumeRequest struct {
	Kind   string // one of the Workload kinds (env.go)
	Name   string // the workload's name in the agent's namespace or swarm
	Volume string // the volume's name in the pod spec; on Swarm the mount's target
	Holder Holder // the run asking; the helper carries it as its receipt
	// ReadOnly makes the helper mount the volume read-only, whatever the
	// workload does (OpenRules).
	ReadOnly bool
}

func (r VolumeRequest) String() string { return r.Kind + "/" + r.Name + ":" + r.Volume }

// CheckVolumeRequest refuses a request that names no volume: an unknown
// kind of workload, a name no platform allows, an empty volume. Platforms
// check their own rules on top.
func CheckVolumeRequest(r VolumeRequest) error {
	if err := CheckEnvRequest(EnvRequest{Kind: r.Kind, Name: r.Name}); err != nil {
		return err
	}
	if r.Volume == "" || len(r.Volume) > 253 {
		return fmt.Errorf("the volume's name %q must be 1 to 253 characters", printable(r.Volume))
	}
	for _, c := range []byte(r.Volume) {
		if c < 0x21 || c > 0x7e || c == ':' || c == '\\' {
			return fmt.Errorf("the volume %q holds a character no volume name or mount path has", printable(r.Volume))
		}
	}
	return nil
}

// Volume is a helper serving a volume, as the run reaches it.
type Volume struct {
	// ID is what the platform knows the helper by, for ReleaseVolume.
	ID string
	// Host and Port are the cluster name and port the helper answers on
	// (port 445), which the run dials through the agent.
	Host string
	Port int
	// Share, User and Password are the SMB share and its one credential,
	// made for this helper alone.
	Share, User, Password string
	// ReadOnly is set when the helper cannot write (a ConfigMap, a Secret,
	// a read-only mount).
	ReadOnly bool
	// Detail is one line for the developer: what is served, as whom.
	Detail string
}

// NewVolumeCredential returns a fresh user name and password for a helper.
func NewVolumeCredential() (user, password string) {
	b := make([]byte, 24)
	rand.Read(b)
	return "plug", hex.EncodeToString(b)
}

// volumeMsg asks for a volume (CLI to agent).
type volumeMsg struct {
	ID     string `json:"id"` // chosen by the CLI, echoed in volume_ready
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	Volume string `json:"volume"`
}

// volumeReadyMsg answers a volumeMsg (agent to CLI).
type volumeReadyMsg struct {
	ID       string `json:"id"`
	Host     string `json:"host,omitempty"`
	Port     int    `json:"port,omitempty"`
	Share    string `json:"share,omitempty"`
	User     string `json:"user,omitempty"`
	Password string `json:"password,omitempty"`
	ReadOnly bool   `json:"read_only,omitempty"`
	Detail   string `json:"detail,omitempty"`
	Error    string `json:"error,omitempty"`
}

func (m *volumeMsg) check() error {
	if m.ID == "" || len(m.ID) > 64 {
		return errors.New("volume request without an id")
	}
	return nil
}

func (m *volumeReadyMsg) check() error {
	if err := checkFields("volume_ready", []*string{&m.ID, &m.Host, &m.Share, &m.User, &m.Password}, []*string{&m.Detail, &m.Error}); err != nil {
		return err
	}
	if m.Error == "" && (CheckPort(m.Port) != nil || m.Host == "") {
		return errors.New("volume_ready: no address")
	}
	return nil
}

// answerVolume answers a volume request of dc's run. It runs on its own
// goroutine: making a helper takes seconds.
func (dc *devConn) answerVolume(frame []byte) {
	a := dc.a
	m, err := decodeMsg[volumeMsg](frame)
	if err != nil {
		dc.sendControl(volumeReadyMsg{ID: printable(m.ID), Error: err.Error()})
		return
	}
	v, err := a.serveVolume(dc, m)
	if err != nil {
		dc.sendControl(volumeReadyMsg{ID: m.ID, Error: err.Error()})
		return
	}
	dc.sendControl(volumeReadyMsg{ID: m.ID, Host: v.Host, Port: v.Port, Share: v.Share, User: v.User,
		Password: v.Password, ReadOnly: v.ReadOnly, Detail: v.Detail})
}

// serveVolume makes the helper of m for dc's run, and keeps it with the
// run until the run ends.
func (a *Agent) serveVolume(dc *devConn, m volumeMsg) (Volume, error) {
	vs, ok := a.Platform.(VolumeServer)
	if !ok {
		return Volume{}, fmt.Errorf("this agent (%s) cannot serve volumes", a.platformName())
	}
	if why := a.refusal(); why != "" {
		return Volume{}, errors.New(why)
	}
	r := dc.currentRun()
	if r == nil || r.plain {
		return Volume{}, errors.New("a volume is asked for by a run of plug, after its hello")
	}
	req := VolumeRequest{Kind: m.Kind, Name: m.Name, Volume: m.Volume,
		Holder: Holder{Run: r.id, Agent: a.ID, Developer: r.developer, User: r.user, Since: time.Now()}}
	if err := CheckVolumeRequest(req); err != nil {
		return Volume{}, err
	}
	if err := a.openVolume(r.developer, &req); err != nil {
		dc.logf("run %s: volume %s for %s (%s): refused: %v", r.id, req, r.user, r.developer, err)
		return Volume{}, err
	}
	r.mu.Lock()
	switch {
	case r.ended:
		r.mu.Unlock()
		return Volume{}, fmt.Errorf("run %s has ended", r.id)
	case len(r.volumes) >= MaxRunVolumes:
		r.mu.Unlock()
		countCap("volumes_per_run")
		return Volume{}, fmt.Errorf("a run may have %d volumes at once", MaxRunVolumes)
	case r.volumes[m.ID] != nil:
		v := *r.volumes[m.ID]
		r.mu.Unlock()
		return v, nil // asked again after a reconnect
	}
	r.volumes[m.ID] = &Volume{} // the place is taken while the helper is made
	r.mu.Unlock()
	if err := a.usage.take(r.developer, useVolume); err != nil {
		r.mu.Lock()
		delete(r.volumes, m.ID)
		r.mu.Unlock()
		dc.logf("run %s: volume %s for %s (%s): refused: %v", r.id, req, r.user, r.developer, err)
		return Volume{}, err
	}

	who := fmt.Sprintf("%s (%s)", r.user, r.developer)
	ctx, cancel := context.WithTimeout(a.ctx, volumeTimeout)
	defer cancel()
	v, err := vs.ServeVolume(ctx, req)
	if err != nil {
		a.usage.give(r.developer, useVolume) // no helper was made
	} else {
		err = a.awaitName(ctx, v.Host, v.Port)
		if err != nil {
			a.releaseVolume(r, v)
		}
	}
	r.mu.Lock()
	if err != nil || r.ended {
		delete(r.volumes, m.ID)
		ended := r.ended
		r.mu.Unlock()
		if err == nil && ended {
			a.releaseVolume(r, v)
			return Volume{}, fmt.Errorf("run %s has ended", r.id)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("the helper of %s did not answer within %s", req, volumeTimeout)
		}
		dc.logf("run %s: volume %s for %s: refused: %v", r.id, req, who, err)
		return Volume{}, err
	}
	if req.ReadOnly {
		v.Detail += fmt.Sprintf("; read-only to keys that are not members (%s=%s)", EnvOpenVolumes, OpenVolumesReadOnly)
	}
	r.volumes[m.ID] = &v
	r.mu.Unlock()
	dc.logf("run %s: volume %s for %s served by %s (%s)", r.id, req, who, v.Host, v.Detail)
	a.audit(AuditEvent{Event: AuditVolumeServed, Run: r.id, User: r.user, Key: r.developer, Name: v.Host, Port: v.Port, Reason: req.String()})
	return v, nil
}

// awaitName waits until host:port is one of the cluster's names a run may
// dial (the helper's Service has reached the agent's catalog), and
// answers there.
func (a *Agent) awaitName(ctx context.Context, host string, port int) error {
	ctx, cancel := context.WithTimeout(ctx, volumeNameWait)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if c, known, _ := a.names.get(); known {
			if _, err := a.dial.nameRule(c, known, "tcp", host, port); err == nil {
				break
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the helper's name %s did not reach the agent's names within %s", host, volumeNameWait)
		case <-tick.C:
		}
	}
	// The Service's routing (kube-proxy) follows its endpoints a moment
	// later: the run is told once a connection gets through.
	var last error
	for {
		c, err := a.dialForRun(ctx, "tcp", host, port)
		if err == nil {
			c.Close()
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("the helper does not answer at %s:%d within %s: %v", host, port, volumeNameWait, last)
		case <-tick.C:
		}
	}
}

// releaseVolume removes the helper of v, which run r had, and gives its
// place among the agent's volumes back.
func (a *Agent) releaseVolume(r *run, v Volume) {
	vs, ok := a.Platform.(VolumeServer)
	if !ok || v.ID == "" {
		return
	}
	a.usage.give(r.developer, useVolume)
	ctx, cancel := a.platformContext()
	defer cancel()
	if err := vs.ReleaseVolume(ctx, v.ID); err != nil {
		a.plog.printf(r.developer, "run %s: removing the volume helper %s failed (the sweep removes it): %v", r.id, v.Host, err)
		return
	}
	a.audit(AuditEvent{Event: AuditVolumeBack, Run: r.id, User: r.user, Key: r.developer, Name: v.Host, Port: v.Port})
}

// Volume asks the agent for the volume of req (its Holder is filled by the
// agent) and returns where the run reaches it once its helper answers.
// The helper lasts as long as the run. A refusal is a *VolumeError saying
// why. While the session is reconnecting, Volume waits for it, within ctx.
func (s *Session) Volume(ctx context.Context, req VolumeRequest) (Volume, error) {
	if err := CheckVolumeRequest(req); err != nil {
		return Volume{}, err
	}
	id := newRunID("vol-")
	for {
		cc, err := s.connected(ctx)
		if err != nil {
			return Volume{}, err
		}
		m, err := cc.requestVolume(ctx, volumeMsg{ID: id, Kind: req.Kind, Name: req.Name, Volume: req.Volume})
		if errors.Is(err, errConnLost) {
			continue
		}
		if err != nil {
			return Volume{}, err
		}
		if m.Error != "" {
			return Volume{}, &VolumeError{Text: m.Error}
		}
		return Volume{Host: m.Host, Port: m.Port, Share: m.Share, User: m.User, Password: m.Password,
			ReadOnly: m.ReadOnly, Detail: m.Detail}, nil
	}
}

// VolumeError is an agent's refusal of a volume: the workload or the
// volume does not exist, the volume cannot be mounted by another pod, the
// namespace's admission refuses the helper. Text says what to do.
type VolumeError struct{ Text string }

func (e *VolumeError) Error() string { return e.Text }

// requestVolume sends m and waits for its volume_ready.
func (cc *clientConn) requestVolume(ctx context.Context, m volumeMsg) (volumeReadyMsg, error) {
	ch, done := awaitAnswer(&cc.mu, cc.volumeWaiters, m.ID)
	defer done()
	if err := cc.control.send(m); err != nil {
		return volumeReadyMsg{}, errConnLost
	}
	timer := time.NewTimer(volumeWait)
	defer timer.Stop()
	select {
	case r := <-ch:
		return r, nil
	case <-cc.gone:
		return volumeReadyMsg{}, errConnLost
	case <-timer.C:
		return volumeReadyMsg{}, fmt.Errorf("the agent did not answer the volume request within %s: it may be older than this plug (plug %s); update the agent", volumeWait, Version)
	case <-ctx.Done():
		return volumeReadyMsg{}, ctx.Err()
	}
}

// volumeReady hands a volume_ready to the request waiting for it.
func (cc *clientConn) volumeReady(m volumeReadyMsg) {
	cc.mu.Lock()
	ch := cc.volumeWaiters[m.ID]
	cc.mu.Unlock()
	if ch != nil {
		select {
		case ch <- m:
		default:
		}
	}
}
