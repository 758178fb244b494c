// Package kubeplatform is the Kubernetes side of plug's agent: it
// implements tunnel.Platform on the k8sapi client.
//
// A name nothing answers to yet becomes a Service without a selector,
// labelled as plug's, whose one EndpointSlice points at the agent pod that
// holds the run. A deployed Service of that name is taken over: its
// selector is removed (the original selector and ports are kept in a
// receipt annotation on the Service itself), the controllers' endpoints are
// deleted, and plug's EndpointSlices point the served ports at the agent
// and the others at the deployed pods. The ClusterIP never changes.
//
// Every change carries the receipt, and the receipt is what undoes it:
// Release at the end of a run, or the sweep of any agent replica when the
// holder pod is gone, its heartbeat stale, or (at boot) the pod is the
// sweeping one itself.
package kubeplatform

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"plug/k8sapi"
	"plug/tunnel"
)

// Options configure a Platform.
type Options struct {
	Client    *k8sapi.Client
	Namespace string // where the agent runs and serves names
	PodName   string // the agent's pod; "" for an agent run outside a pod
	PodIP     string // the address the cluster reaches this agent on
	// NodeName is the node the agent's pod runs on. The agent's endpoint
	// carries it: kube-proxy masquerades a pod's calls to its own Service
	// (hairpin) only to endpoints it knows are on its node, and the agent
	// calls the names it serves, to prove their path.
	NodeName string
	// Logf receives status lines for the agent's log.
	Logf func(format string, args ...any)

	// Heartbeat is how often the receipts held here are renewed (20 s),
	// Stale how old a heartbeat must be for any agent to give the name back
	// (90 s), and SweepEvery how often receipts are swept (1 min).
	Heartbeat, Stale, SweepEvery time.Duration
}

// Platform is a Kubernetes namespace as the tunnel sees it.
type Platform struct {
	c     *k8sapi.Client
	ns    string
	pod   string
	node  string
	ip    net.IP
	logf  func(format string, args ...any)
	times Options

	settling sync.Mutex // one settle at a time: Serve and the guard write the same slices

	mu      sync.Mutex
	held    map[string]*holding // names this agent serves, by name
	pending map[string]tunnel.Binding
	kick    chan struct{} // asks the guard to check the held names now
}

var _ tunnel.Platform = (*Platform)(nil)

// New returns the Platform of opts.
func New(opts Options) (*Platform, error) {
	if opts.Client == nil || opts.Namespace == "" {
		return nil, errors.New("kubeplatform: a client and a namespace are required")
	}
	ip := net.ParseIP(opts.PodIP)
	if ip == nil {
		return nil, fmt.Errorf("the agent's address %q is not an IP address; set POD_IP from the downward API (status.podIP), as deploy/plug-k8s.yaml does", opts.PodIP)
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	opts.Heartbeat = orDefault(opts.Heartbeat, 20*time.Second)
	opts.Stale = orDefault(opts.Stale, 90*time.Second)
	opts.SweepEvery = orDefault(opts.SweepEvery, time.Minute)
	return &Platform{
		c: opts.Client, ns: opts.Namespace, pod: opts.PodName, node: opts.NodeName, ip: ip, logf: opts.Logf, times: opts,
		held: map[string]*holding{}, pending: map[string]tunnel.Binding{}, kick: make(chan struct{}, 1),
	}, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// NewFromEnv returns the Platform of an agent started the way
// deploy/plug-k8s.yaml starts it: the API server and credentials of the
// pod's service account (or, outside a pod, of $KUBECONFIG or
// ~/.kube/config), and from the downward API POD_NAMESPACE, POD_NAME and
// POD_IP. Its node is NODE_NAME, or else read from its pod.
func NewFromEnv(logf func(format string, args ...any)) (*Platform, error) {
	cfg, err := k8sapi.InCluster()
	if errors.Is(err, k8sapi.ErrNotInCluster) {
		cfg, err = k8sapi.LoadKubeconfig(k8sapi.DefaultKubeconfig(), "")
	}
	if err != nil {
		return nil, err
	}
	client, err := k8sapi.New(cfg)
	if err != nil {
		return nil, err
	}
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = cfg.Namespace
	}
	if ns == "" {
		return nil, errors.New("the agent's namespace is unknown: set POD_NAMESPACE (deploy/plug-k8s.yaml sets it from the downward API)")
	}
	opts := Options{Client: client, Namespace: ns, PodName: os.Getenv("POD_NAME"), PodIP: os.Getenv("POD_IP"), NodeName: os.Getenv("NODE_NAME"), Logf: logf}
	if opts.NodeName == "" && opts.PodName != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		pod, err := client.Pods(ns).Get(ctx, opts.PodName)
		cancel()
		if err != nil && logf != nil {
			logf("cannot read the agent's own pod %s for its node (%v): calls the agent makes to the names it serves may not reach it (set NODE_NAME from the downward API, spec.nodeName)", opts.PodName, err)
		} else {
			opts.NodeName = pod.Spec.NodeName
		}
	}
	return New(opts)
}

// DialContext connects to address from inside the agent's pod: cluster DNS
// resolves the name, kube-proxy and network policy apply as to any pod.
func (p *Platform) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, address)
}
