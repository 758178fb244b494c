package kubeplatform

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"plug/k8sapi"
	"plug/tunnel"
)

// The deployed pods of a taken-over Service answer the callers a run
// cannot take (tunnel.DeployedDialer): while the run is away, while the
// developer's process does not answer, and while the name is given back.
// The agent dials them itself, as the parked selector picks them: a ready
// pod, on the port the Service mapped the caller's port to.

const (
	// deployedFresh is how old this agent's list of a name's deployed pods
	// may be when a caller needs one; an older one is read again in the
	// background (so at most once per deployedFresh per name, whatever the
	// callers).
	deployedFresh = 2 * time.Second
)

// deployedSet is what answered a taken-over name before the run: the pods
// its original selector picks, each with the port each Service port
// reaches on it. This agent keeps one for each name it has taken over (or
// holds for a run that moved here), from the first takeover on, so that
// callers are answered while the name is given back too; it is replaced
// at the name's next takeover.
type deployedSet struct {
	original original

	mu      sync.Mutex
	pods    []deployedPod // ready, in no particular order
	read    time.Time     // when pods was listed
	reading bool          // a list is under way
}

// deployedPod is one ready pod behind a taken-over Service.
type deployedPod struct {
	ip    string
	ports map[int]int // Service port → the pod's port
}

var _ tunnel.DeployedDialer = (*Platform)(nil)

var _ tunnel.DeployedLister = (*Platform)(nil)

// DialDeployed connects to a ready pod of the Service b.Name's original
// selector, on the port its original Service port b.Port targets; see
// tunnel.DeployedDialer. It tries the pods DeployedAddrs lists as
// tunnel.DialBackends does.
func (p *Platform) DialDeployed(ctx context.Context, b tunnel.Binding) (net.Conn, error) {
	targets, err := p.DeployedAddrs(b)
	if err != nil {
		return nil, err
	}
	return tunnel.DialBackends(ctx, targets)
}

// DeployedAddrs lists the ready pods of the Service b.Name's original
// selector, each on the port its original Service port b.Port targets;
// see tunnel.DeployedLister. The pods are those last listed (by the guard,
// or in the background once the list is older than deployedFresh).
func (p *Platform) DeployedAddrs(b tunnel.Binding) ([]string, error) {
	p.mu.Lock()
	d := p.deployed[b.Name]
	p.mu.Unlock()
	if d == nil {
		return nil, fmt.Errorf("%s is a name this run added: no deployed service answers it", b.Name)
	}
	var targets []string
	for _, pod := range d.current(p, b.Name) {
		if port := pod.ports[b.Port]; port != 0 {
			targets = append(targets, net.JoinHostPort(pod.ip, strconv.Itoa(port)))
		}
	}
	if len(targets) == 0 {
		return nil, fmt.Errorf("no pod of %s's selector %s is ready", b.Name, selectorString(d.original.Selector))
	}
	return targets, nil
}

// noteDeployed records what answered name before its takeover, and the
// ready pods of it listed now, replacing what was recorded before.
func (p *Platform) noteDeployed(name string, orig original, pods []k8sapi.Pod) {
	d := &deployedSet{original: orig}
	d.set(pods)
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur := p.deployed[name]; cur != nil && sameOriginal(cur.original, orig) {
		cur.set(pods) // the same Service: keep the one callers may be using
		return
	}
	p.deployed[name] = d
}

// forgetDeployed drops what was recorded of name: it is a name of plug's
// own now.
func (p *Platform) forgetDeployed(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.deployed, name)
}

func sameOriginal(a, b original) bool {
	return selectorString(a.Selector) == selectorString(b.Selector) && fmt.Sprint(a.Ports) == fmt.Sprint(b.Ports)
}

// set makes the ready pods among pods the set's.
func (d *deployedSet) set(pods []k8sapi.Pod) {
	var out []deployedPod
	for i := range pods {
		pod := &pods[i]
		if !pod.Ready() {
			continue
		}
		dp := deployedPod{ip: pod.Status.PodIP, ports: map[int]int{}}
		for _, sp := range d.original.Ports {
			if target := targetPort(sp, *pod); target != 0 && (sp.Protocol == "" || sp.Protocol == "TCP") {
				dp.ports[sp.Port] = target
			}
		}
		out = append(out, dp)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pods, d.read = out, time.Now()
}

// current returns the set's ready pods. A list older than deployedFresh
// is read again in the background (one read at a time), so that no caller
// waits for the API server: the guard keeps the list current anyway, at
// every change of the namespace's pods it sees.
func (d *deployedSet) current(p *Platform, name string) []deployedPod {
	d.mu.Lock()
	defer d.mu.Unlock()
	if time.Since(d.read) > deployedFresh && !d.reading {
		d.reading = true
		go d.refresh(p, name)
	}
	return d.pods
}

// refresh lists the set's pods again; a failed list keeps the older one.
func (d *deployedSet) refresh(p *Platform, name string) {
	defer func() {
		d.mu.Lock()
		d.reading = false
		d.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := p.c.Pods(p.ns).List(ctx, k8sapi.ListOptions{LabelSelector: selectorString(d.original.Selector)})
	if err != nil {
		p.logf("%s: listing its deployed pods for the callers the run cannot take: %v", name, err)
		return
	}
	d.set(list.Items)
}
