// Package gateway runs plug's agent inside a larger product (a gateway)
// that supplies what plug agent otherwise reads from its environment: the
// keys developers deposited and the accounts they belong to, the switches
// that open and close the tunnel, the address developers reach it at, and
// where the audit trail goes. The gateway shows the tunnel's Status on its
// own pages.
//
//	t := gateway.New(gateway.Config{Addr: ":22222", Keys: store, Switches: switches, ...})
//	go t.Run(ctx)
//	...
//	t.Changed() // a key was removed, a switch turned, the address recorded
//	page.Show(t.Status())
package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"plug/tunnel"
)

// Switches are the gateway's switches that open the tunnel; it runs only
// while every one is on.
type Switches interface {
	// ClosedBy names a switch that is off (e.g. "Developer mode"), or ""
	// when every one is on.
	ClosedBy() string
}

// Config is what the gateway supplies.
type Config struct {
	// Addr is where the tunnel listens, e.g. ":22222".
	Addr string
	// HostKey is the tunnel's SSH host key, kept by the gateway.
	HostKey ssh.Signer
	// Keys are the keys developers deposited and the accounts they belong
	// to (tunnel.Keys): Admit refuses a key removed from a profile, or of
	// an account that lost the developer capability, saying why
	// (a *tunnel.Revoked says who took it back).
	Keys tunnel.Keys
	// Switches open and close the tunnel.
	Switches Switches
	// PublicAddr is the host:port developers reach the tunnel at, as
	// recorded on the gateway's page: the installer's commands carry it.
	// It is read each time the tunnel opens.
	PublicAddr func() string
	// Audit receives the audit trail (tunnel.AuditEvent).
	Audit func(tunnel.AuditEvent)
	// Platform returns the cluster the gateway runs in. Its error says why
	// the tunnel cannot run here (a gateway outside a container cannot
	// provision a name in the cluster); it is asked again at each Changed
	// and every RetryEvery.
	Platform func(ctx context.Context) (tunnel.Platform, error)
	// ID names this gateway instance in the cluster; BinDir holds the CLI
	// binaries the installer hands out (tunnel.Agent).
	ID, BinDir string
	// Logf receives the tunnel's log lines.
	Logf func(format string, args ...any)
	// RetryEvery is how often a tunnel that cannot run tries again
	// (default 30 s).
	RetryEvery time.Duration
}

// Tunnel is the agent run by a gateway.
type Tunnel struct {
	cfg     Config
	changed chan struct{}

	mu     sync.Mutex
	status string
	agent  *tunnel.Agent // while open
	addr   string        // where it listens, while open
}

// New returns the tunnel of cfg, closed until Run.
func New(cfg Config) *Tunnel {
	if cfg.RetryEvery <= 0 {
		cfg.RetryEvery = 30 * time.Second
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	return &Tunnel{cfg: cfg, changed: make(chan struct{}, 1), status: "not started"}
}

// Changed tells the tunnel that a key, an account, a switch or the address
// changed: the runs of keys no longer admitted end at once, and a switch
// turned off closes the tunnel, ending every run with the switch's name.
func (t *Tunnel) Changed() {
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

// Status says what the tunnel is doing: "listening on :22222", "closed by
// switch X", or "switched on but cannot run here: ...".
func (t *Tunnel) Status() string {
	t.mu.Lock()
	a, addr, status := t.agent, t.addr, t.status
	t.mu.Unlock()
	if a == nil {
		return status
	}
	if why := a.Refusing(); why != "" {
		return "switched on but cannot run here: " + why
	}
	return "listening on " + addr
}

func (t *Tunnel) setStatus(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.status = fmt.Sprintf(format, args...)
}

// Run opens and closes the tunnel as the switches say, until ctx ends;
// then the runs end as at a restart of the gateway (they reconnect to it,
// or to another instance). It returns ctx.Err().
func (t *Tunnel) Run(ctx context.Context) error {
	if t.cfg.HostKey == nil || t.cfg.Platform == nil || t.cfg.Switches == nil {
		return errors.New("gateway: a Config needs a HostKey, a Platform and Switches")
	}
	for ctx.Err() == nil {
		if by := t.cfg.Switches.ClosedBy(); by != "" {
			t.setStatus("closed by switch %s", by)
			t.wait(ctx, 0)
			continue
		}
		if err := t.open(ctx); err != nil {
			t.setStatus("switched on but cannot run here: %v", err)
			t.wait(ctx, t.cfg.RetryEvery)
		}
	}
	return ctx.Err()
}

// wait waits for Changed, for d when d is not 0, or for ctx.
func (t *Tunnel) wait(ctx context.Context, d time.Duration) {
	var after <-chan time.Time
	if d > 0 {
		after = time.After(d)
	}
	select {
	case <-t.changed:
	case <-after:
	case <-ctx.Done():
	}
}

// open runs the agent until a switch closes the tunnel or ctx ends.
func (t *Tunnel) open(ctx context.Context) error {
	platform, err := t.cfg.Platform(ctx)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", t.cfg.Addr)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %v", t.cfg.Addr, err)
	}
	a := &tunnel.Agent{
		Platform: platform, HostKey: t.cfg.HostKey, Keys: t.cfg.Keys, BinDir: t.cfg.BinDir,
		ID: t.cfg.ID, Logf: t.cfg.Logf, Audit: t.cfg.Audit,
	}
	if t.cfg.PublicAddr != nil {
		a.PublicAddr = t.cfg.PublicAddr()
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, l) }()
	t.mu.Lock()
	t.agent, t.addr = a, t.cfg.Addr
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		t.agent = nil
		t.mu.Unlock()
	}()
	for {
		select {
		case err := <-served:
			if ctx.Err() != nil {
				return nil
			}
			return err
		case <-t.changed:
			if by := t.cfg.Switches.ClosedBy(); by != "" {
				t.mu.Lock()
				t.agent, t.status = nil, "closed by switch "+by
				t.mu.Unlock()
				a.Stop("switch "+by, "the tunnel was closed: "+by+" was turned off")
				<-served // after the connections of names given back drain
				return nil
			}
			a.Recheck()
		}
	}
}
