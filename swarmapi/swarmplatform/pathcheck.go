package swarmplatform

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"plug/swarmapi"
	"plug/tunnel"
)

// The agent proves the path of each served name (tunnel's path proof). On
// Swarm a name is a DNS alias answered round robin: the proof tries every
// address it resolves to (LookupHost), so a parked service scaled back up
// by hand or by a deploy, answering beside the relay, is found. The
// platform tells the proof at once when a service behind a held name
// changes (the engine's service events).
//
// Swarm has no reconciling controller of its own, but a stack is
// re-applied by every `docker stack deploy` of it, by hand or by whatever
// deploys it on each push: that ends a park. The label
// com.docker.stack.namespace says a service belongs to a stack, and the
// developer is told so when plug parks it.

// labelStack is the label docker stack deploy puts on a stack's services.
const labelStack = "com.docker.stack.namespace"

// eventsRetry is how long the agent waits before following the engine's
// events again after the stream ended.
const eventsRetry = 5 * time.Second

var _ tunnel.NamedPlatform = (*Platform)(nil)

// String names the platform for the developer's terminal and plug doctor
// (tunnel.NamedPlatform).
func (p *Platform) String() string {
	if len(p.opts.Networks) == 0 {
		return "Docker Swarm, on no overlay network"
	}
	return "Docker Swarm, network " + p.networkNames()
}

var _ tunnel.HostResolver = (*Platform)(nil)

// LookupHost returns every address host resolves to on the agent's
// networks: Docker's resolver answers the agent's container as any task's
// (tunnel.HostResolver).
func (p *Platform) LookupHost(ctx context.Context, host string) ([]string, error) {
	return net.DefaultResolver.LookupHost(ctx, host)
}

// followPaths follows the engine's service events until ctx ends: a
// change of a service behind a name held here proves its path again, and
// a parked service that runs again is told to the run at once.
func (p *Platform) followPaths(ctx context.Context) {
	p.followEvents(ctx, time.Now(), "service", eventsRetry, "the paths of served names are checked every 30s", func(e swarmapi.Event) {
		for name, h := range p.holdings() {
			if e.Actor.ID != h.parked && e.Actor.ID != h.relayID && e.Actor.Attributes["name"] != name {
				continue
			}
			for _, b := range h.bindings {
				if b.Notify != nil {
					b.Notify(tunnel.Event{Name: name, Kind: tunnel.EventPathChanged})
				}
			}
			if e.Actor.ID == h.parked {
				go p.warnIfUnparked(ctx, name, h)
			}
		}
	})
}

// warnIfUnparked tells h's run, once, when the service parked for name
// runs tasks again, or lost its receipt: its tasks answer the name beside
// the relay, and plug does not fight that.
func (p *Platform) warnIfUnparked(ctx context.Context, name string, h holding) {
	if h.parked == "" || h.warned || !p.unparked(ctx, h.parked) {
		return
	}
	if !p.markWarned(name) {
		return
	}
	who := "somebody else (a docker service scale or update, a stack deploy, a CD pipeline?)"
	if s, err := p.opts.Client.Service(ctx, h.parked); err == nil {
		if stack := s.Spec.Labels[labelStack]; stack != "" {
			who = fmt.Sprintf("a deploy of its stack %s, or somebody else (label %s: %s)", stack, labelStack, stack)
		}
	}
	p.notify(h, tunnel.EventWarning, fmt.Sprintf(
		"%s: the parked service runs again, changed by %s: its tasks answer the name beside this run; plug does not fight that change", name, who))
}

// stackNotice is what the developer is told when plug parks svc, a
// service of a stack, for name.
func stackNotice(svc *swarmapi.Service, name string) (tunnel.Event, bool) {
	stack := svc.Spec.Labels[labelStack]
	if stack == "" {
		return tunnel.Event{}, false
	}
	return tunnel.Event{Name: name, Kind: tunnel.EventWarning, Text: strings.Join([]string{
		fmt.Sprintf("%s belongs to the stack %s (label %s: %s): every docker stack deploy of %s, by hand or by a pipeline that deploys it on each change, puts its replicas back and ends the park;", svc.Spec.Name, stack, labelStack, stack, stack),
		fmt.Sprintf("its tasks then answer %s beside this run, and plug warns you when they do.", name),
		fmt.Sprintf("For the session, hold the deploys of %s, or serve a name the stack does not own.", stack),
	}, " ")}, true
}
