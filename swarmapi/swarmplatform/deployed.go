package swarmplatform

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"plug/tunnel"
)

// The running tasks of a service this agent took over answer the callers
// a run cannot take (tunnel.DeployedDialer), as long as they run: until
// the tasks a takeover parks have stopped, while the run is away (away.go
// wakes the service, and a caller waits for its first task), and once a
// give-back has restored it, until its relay is gone. While the run is
// there but its process does not answer, the parked service runs no task,
// and such a caller is refused.

const (
	// deployedFresh is how old this agent's list of a service's running
	// tasks may be when a caller needs one; an older one is read again.
	deployedFresh = 250 * time.Millisecond
)

// deployedSet is the service a name was taken over from, and the addresses
// of its running tasks on the agent's networks. This agent keeps one for
// each name it has taken over, from the takeover on, past the give-back
// (callers reach it until the relay is gone); it is replaced at the name's
// next takeover.
type deployedSet struct {
	service string // its ID

	mu      sync.Mutex
	ips     []netip.Addr
	read    time.Time
	reading bool // a list is under way
}

var _ tunnel.DeployedDialer = (*Platform)(nil)

// DialDeployed connects to a running task of the service b.Name was taken
// over from, on b.Port (the port callers use is the task's own on an
// overlay network); see tunnel.DeployedDialer. It fails when the service
// is parked, for it runs no task, but while it is woken (its run is away)
// it waits up to wakeWait for a task to run.
func (p *Platform) DialDeployed(ctx context.Context, b tunnel.Binding) (net.Conn, error) {
	p.mu.Lock()
	d := p.takenFrom[b.Name]
	p.mu.Unlock()
	if d == nil {
		return nil, fmt.Errorf("%s is a name this run added: no deployed service answers it", b.Name)
	}
	ips, err := d.current(ctx, p)
	if err == nil && len(ips) == 0 && p.awake(b.Name) {
		ips, err = d.await(ctx, p)
	}
	if err != nil {
		return nil, err
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("the service %s runs no task: it is parked", b.Name)
	}
	return tunnel.DialBackends(ctx, targetsOf(ips, b.Port))
}

// noteDeployed records that name is taken over from the service id.
func (p *Platform) noteDeployed(name, id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d := p.takenFrom[name]; d == nil || d.service != id {
		p.takenFrom[name] = &deployedSet{service: id}
	}
}

// forgetDeployed drops what was recorded of name: it is a name of plug's
// own now.
func (p *Platform) forgetDeployed(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.takenFrom, name)
}

// readDeployed reads again the running tasks of the service name was taken
// over from, if this agent took it over; a failed read keeps the older list.
func (p *Platform) readDeployed(ctx context.Context, name string) {
	p.mu.Lock()
	d := p.takenFrom[name]
	p.mu.Unlock()
	if d != nil {
		d.refresh(ctx, p)
	}
}

// current returns the addresses of the service's running tasks on the
// agent's networks. A list older than deployedFresh is read again in the
// background (one read at a time), so that no caller waits for the
// engine; the first is read at once.
func (d *deployedSet) current(ctx context.Context, p *Platform) ([]netip.Addr, error) {
	d.mu.Lock()
	first := d.read.IsZero()
	if !first && time.Since(d.read) > deployedFresh && !d.reading {
		d.reading = true
		go d.refresh(context.WithoutCancel(ctx), p)
	}
	ips := d.ips
	d.mu.Unlock()
	if !first {
		return ips, nil
	}
	err := d.refresh(ctx, p)
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ips, err
}

// await waits up to wakeWait for the service to run a task, reading its
// tasks as current does, and returns their addresses.
func (d *deployedSet) await(ctx context.Context, p *Platform) ([]netip.Addr, error) {
	var ips []netip.Addr
	err := poll(ctx, wakeWait, func() (done bool, err error) {
		ips, err = d.current(ctx, p)
		return len(ips) > 0, err
	})
	return ips, err
}

// refresh lists the service's running tasks again; a failed list keeps the
// older one. A background read and a give-back's may overlap: the list
// asked for last is kept.
func (d *deployedSet) refresh(ctx context.Context, p *Platform) error {
	defer func() {
		d.mu.Lock()
		d.reading = false
		d.mu.Unlock()
	}()
	asked := time.Now()
	// A task being stopped (a takeover has just parked its service) is
	// taken while it runs: the engine no longer names it in DNS, but it
	// still answers for the moment before it is stopped.
	tasks, err := p.opts.Client.Tasks(ctx, map[string][]string{"service": {d.service}})
	if err != nil {
		return fmt.Errorf("listing the tasks of the deployed service: %w", err)
	}
	var ips []netip.Addr
	for _, t := range tasks {
		if !t.Running() {
			continue
		}
		for _, na := range t.NetworksAttachments {
			if !slices.ContainsFunc(p.opts.Networks, func(n NetworkRef) bool { return n.ID == na.Network.ID }) {
				continue
			}
			for _, cidr := range na.Addresses {
				if pfx, err := netip.ParsePrefix(cidr); err == nil {
					ips = append(ips, pfx.Addr())
				}
			}
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if asked.After(d.read) {
		d.ips, d.read = ips, asked
	}
	return nil
}
