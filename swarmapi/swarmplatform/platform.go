// Package swarmplatform is the Docker Swarm side of plug's agent: it
// implements tunnel.Platform on the swarmapi client.
//
// The agent runs as a Swarm service with the engine's socket mounted. A
// name it serves is a relay service: one task of the agent's own image
// running `plug relay`, on the agent's overlay networks, answering to the
// name and forwarding to the agent. A deployed service of that name is
// parked (it runs no task; the original value of every field changed is
// kept in a receipt label on the service itself) and answers again when
// the relay is gone.
//
// Every change carries its lease or receipt, and that is what undoes it:
// Release at the end of a run, or the sweep of any agent when the holder's
// task is gone or its heartbeat stale, and at boot.
package swarmplatform

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"plug/swarmapi"
	"plug/tunnel"
)

// Options configure a Platform.
type Options struct {
	Client *swarmapi.Client

	// Task is the agent's own task ID. Relays and receipts name it, so that
	// every agent's sweep can tell when their holder is gone. Empty when the
	// agent is not a swarm task; then only the heartbeat tells.
	Task string
	// Service is the agent's own service ID: it is never taken over.
	Service string
	// ServiceName is its name: the members of admission by approval are
	// the ones of this name (members.go).
	ServiceName string
	// Node is the node relays are placed on: the agent's, which holds the
	// agent's image. Empty places them anywhere.
	Node string
	// Image is the image relays run: the agent's own, whose binary has the
	// relay command.
	Image string
	// Address is the agent's IP address that relays dial; it must be
	// reachable from the first of Networks.
	Address string
	// Networks are the overlay networks the agent is attached to: names it
	// serves are put on all of them.
	Networks []NetworkRef
	// Protected are the addresses no run may dial through the agent
	// (tunnel.AddressProtector): the node's, the agent's own, its
	// service's virtual IPs and the gateways of its container's networks
	// (on a bridge, the host).
	Protected []netip.Addr

	// Logf receives one line per change the platform makes or undoes.
	Logf func(format string, args ...any)

	// Heartbeat is how often the heartbeat label of the relays held here
	// is renewed (20 s), Stale how old a heartbeat must be for any agent's
	// sweep to give the name back even when the holder's task still seems
	// to run (90 s), SweepEvery how often the sweep runs after the one at
	// start (1 min), and StartTimeout how long a relay's task may take to
	// run, and a parked service's tasks to stop (45 s).
	Heartbeat, Stale, SweepEvery, StartTimeout time.Duration
}

// NetworkRef names a network.
type NetworkRef struct {
	ID   string
	Name string
}

// Platform is plug's Swarm platform: it serves names on the agent's overlay
// networks through relay services, parks deployed services behind them,
// and undoes both at Release or, for a holder that is gone, in the sweep.
type Platform struct {
	opts Options

	mu    sync.Mutex
	names map[string]*sync.Mutex // serialises Serve and Release per name
	held  map[string]*holding    // the names this agent serves, by name
	// takenFrom is what answered the names this agent took over
	// (deployed.go).
	takenFrom map[string]*deployedSet
	// records are the run records this agent wrote (runs.go), by digest.
	records tunnel.WrittenRecords
	// leased are the names of the services this agent holds beside its
	// relays: volume helpers and copies of services (leased.go).
	leased map[string]bool
}

// The Platform contract. Each optional interface of tunnel/platform.go
// that this Platform has is asserted beside its method.
var _ tunnel.Platform = (*Platform)(nil)

// New returns the Platform of opts.
func New(opts Options) (*Platform, error) {
	if opts.Client == nil {
		return nil, errors.New("swarmplatform: a client is required")
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	opts.Heartbeat, opts.Stale, opts.SweepEvery = tunnel.DefaultTimes(opts.Heartbeat, opts.Stale, opts.SweepEvery)
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 45 * time.Second
	}
	return &Platform{opts: opts, names: map[string]*sync.Mutex{}, held: map[string]*holding{}, takenFrom: map[string]*deployedSet{}, leased: map[string]bool{}}, nil
}

// taskLabel is the label the swarm puts on a task's container.
const taskLabel = "com.docker.swarm.task.id"

// NewFromEnv returns the Platform of an agent running as a swarm
// task with the engine's socket mounted (deploy/plug-swarm.yml). It talks
// to DOCKER_HOST or /var/run/docker.sock, finds its own task from
// PLUG_SWARM_TASK (the stack file sets it to {{.Task.ID}}) or, failing
// that, from its container (its host name), and takes from the task its
// networks, address, node and image.
func NewFromEnv(ctx context.Context, logf func(format string, args ...any)) (*Platform, error) {
	c, err := swarmapi.NewClientFromEnv()
	if err != nil {
		return nil, err
	}
	taskID := os.Getenv("PLUG_SWARM_TASK")
	if taskID == "" {
		if taskID, err = ownTaskFromContainer(ctx, c); err != nil {
			return nil, err
		}
	}
	opts, err := agentOptions(ctx, c, taskID)
	if err != nil {
		return nil, err
	}
	opts.Logf = logf
	return New(opts)
}

// ownTaskFromContainer finds the task of the container plug runs in: the
// swarm names a task's container's host name after the container's ID.
func ownTaskFromContainer(ctx context.Context, c *swarmapi.Client) (string, error) {
	host, err := os.Hostname()
	if err != nil {
		return "", err
	}
	ctr, err := c.Container(ctx, host)
	if swarmapi.IsNotFound(err) {
		return "", fmt.Errorf("plug agent on Swarm runs as a swarm service (deploy/plug-swarm.yml), but no container is named %s here: set PLUG_SWARM_TASK={{.Task.ID}} in the service's environment", host)
	}
	if err != nil {
		return "", err
	}
	id := ctr.Config.Labels[taskLabel]
	if id == "" {
		return "", fmt.Errorf("container %s is not a swarm task: plug agent on Swarm runs as a swarm service (docker stack deploy -c plug-swarm.yml plug)", host)
	}
	return id, nil
}

// agentOptions describes the agent running as task taskID.
func agentOptions(ctx context.Context, c *swarmapi.Client, taskID string) (Options, error) {
	t, err := c.Task(ctx, taskID)
	if swarmapi.IsNotFound(err) {
		return Options{}, fmt.Errorf("PLUG_SWARM_TASK=%s names no task: the stack file sets it to {{.Task.ID}}", taskID)
	}
	if err != nil {
		return Options{}, err
	}
	opts := Options{Client: c, Task: t.ID, Service: t.ServiceID, Node: t.NodeID}
	if svc, err := c.Service(ctx, t.ServiceID); err == nil {
		opts.ServiceName = svc.Spec.Name
	}
	if t.Spec.ContainerSpec != nil {
		opts.Image = t.Spec.ContainerSpec.Image
	}
	if opts.Image == "" {
		return Options{}, errors.New("the agent's task names no image to run relays with")
	}
	for _, a := range t.NetworksAttachments {
		if a.Network.Spec.Ingress || len(a.Addresses) == 0 {
			continue
		}
		if opts.Address == "" {
			prefix, err := netip.ParsePrefix(a.Addresses[0])
			if err != nil {
				return Options{}, fmt.Errorf("the agent's address on %s: %w", a.Network.Spec.Name, err)
			}
			opts.Address = prefix.Addr().String()
		}
		opts.Networks = append(opts.Networks, NetworkRef{ID: a.Network.ID, Name: a.Network.Spec.Name})
	}
	opts.Protected = protectedAddrs(ctx, c, t)
	return opts, nil
}

// protectedAddrs are the addresses of the node task t runs on, of t on
// each network, of its service (virtual IPs), and of the gateways of its
// container's networks.
func protectedAddrs(ctx context.Context, c *swarmapi.Client, t *swarmapi.Task) []netip.Addr {
	var out []netip.Addr
	add := func(s string) {
		if p, err := netip.ParsePrefix(s); err == nil {
			s = p.Addr().String()
		}
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a.Unmap())
		}
	}
	if info, err := c.Info(ctx); err == nil {
		add(info.Swarm.NodeAddr)
	}
	for _, a := range t.NetworksAttachments {
		for _, addr := range a.Addresses {
			add(addr)
		}
	}
	if svc, err := c.Service(ctx, t.ServiceID); err == nil {
		for _, vip := range svc.Endpoint.VirtualIPs {
			add(vip.Addr)
		}
	}
	if cs := t.Status.ContainerStatus; cs != nil && cs.ContainerID != "" {
		if ctr, err := c.Container(ctx, cs.ContainerID); err == nil {
			for _, n := range ctr.NetworkSettings.Networks {
				add(n.IPAddress)
				add(n.Gateway)
			}
		}
	}
	return out
}

var _ tunnel.AddressProtector = (*Platform)(nil)

// ProtectedAddrs are Options.Protected (tunnel.AddressProtector).
func (p *Platform) ProtectedAddrs() []netip.Addr { return p.opts.Protected }

var _ tunnel.CallerAddresser = (*Platform)(nil)

// CallerAddr is Options.Address, which the relays dial: the agent listens
// for the callers of the names it serves there only
// (tunnel.CallerAddresser).
func (p *Platform) CallerAddr() netip.Addr {
	a, _ := netip.ParseAddr(p.opts.Address)
	return a
}

// DialContext connects to address ("name:port") from the agent's container:
// Docker's resolver answers service names and aliases of the networks the
// agent is on, as it does for any task there; the agent's dial policy
// applies to the address connected to.
func (p *Platform) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	d := net.Dialer{Control: tunnel.DialControl(ctx)}
	return d.DialContext(ctx, network, address)
}

// lockName serialises this agent's changes to one name and returns the
// unlock.
func (p *Platform) lockName(name string) func() {
	p.mu.Lock()
	m := p.names[name]
	if m == nil {
		m = &sync.Mutex{}
		p.names[name] = m
	}
	p.mu.Unlock()
	m.Lock()
	return m.Unlock
}
