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
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	// NodeIP is the address of that node (status.hostIP): runs may not dial
	// it through the agent (tunnel.AddressProtector), nor the pod's own
	// address, nor the API server's.
	NodeIP string
	// PodLabels are the labels of the agent's pod: a Service that selects
	// it is plug's own (the manifest's plug Service), which no run may
	// serve, nor consume.
	PodLabels map[string]string
	// Logf receives status lines for the agent's log.
	Logf func(format string, args ...any)
	// MasterServiceEnv are the variables the kubelet makes in every pod
	// for the kubernetes Service of the default namespace, which the
	// environments the agent reads include (MasterServiceEnv). Empty: the
	// agent reads that Service when it needs them, if it may.
	MasterServiceEnv map[string]string
	// Namespaces are the other namespaces whose Services runs reach, if
	// the agent may list and watch them there (PLUG_NAMESPACES; see
	// WatchNames and ParseNamespaces).
	Namespaces []string
	// ServiceAccount is the agent's, which the commands offering a
	// namespace bind (NameNotes); "" is deploy/plug-k8s.yaml's "plug".
	ServiceAccount string

	// Deployment is the agent's own Deployment, which plug update --agent
	// moves to another image (AgentUpdater); "" when the agent's pod
	// belongs to none, or was not read.
	Deployment string

	// AllowShadowing lets runs serve the names of the cluster's own
	// Services (ShadowedNames: kubernetes, kube-dns...), which Serve
	// refuses by default (PLUG_ALLOW_SHADOWING=true).
	AllowShadowing bool

	// HelperImage is the image of the volume helpers (PLUG_HELPER_IMAGE);
	// "" for the agent pod's own.
	HelperImage string

	// Heartbeat is how often the receipts held here are renewed (20 s),
	// Stale how old a heartbeat must be for any agent to give the name back
	// (90 s), and SweepEvery how often receipts are swept (1 min).
	Heartbeat, Stale, SweepEvery time.Duration
	// HandBack bounds how long giving a taken-over Service back waits for
	// the EndpointSlice controller to list its pods again before plug's
	// endpoints for them go (10 s).
	HandBack time.Duration
}

// Platform is a Kubernetes namespace as the tunnel sees it.
type Platform struct {
	c    *k8sapi.Client
	ns   string
	pod  string
	node string
	ip   net.IP
	logf func(format string, args ...any)
	// protected are the addresses runs may not dial (ProtectedAddrs).
	protected []netip.Addr
	podLabels map[string]string // the agent pod's: what selects it is plug's own
	times     Options

	masterEnv map[string]string // Options.MasterServiceEnv

	sweeps sweepCounts // what the sweep did, for PlatformMetrics

	offered    []string // Options.Namespaces
	deployment string   // Options.Deployment
	account    string   // Options.ServiceAccount
	notesMu    sync.Mutex
	notes      []string // NameNotes

	settling sync.Mutex // one settle at a time: Serve and the guard write the same slices
	// booting is held by the boot sweep, which gives back what names this
	// pod, and shared by each Serve, which a boot sweep running meanwhile
	// would undo between its write and its hold.
	booting sync.RWMutex

	eventFailed     atomic.Bool // writing an Event failed once: said once in the log
	mirrorForbidden atomic.Bool // patching Endpoints was forbidden once (keepFromMirror)

	// moving is held while MoveHolder hands a name to another run, and by
	// the guard before it takes a receipt naming another run for a loss.
	moving   sync.Mutex
	mu       sync.Mutex
	ownIPs   []netip.Addr            // the ClusterIPs of plug's own Services and of the API server's, as WatchNames saw them
	held     map[string]*holding     // names this agent serves, by name
	deployed map[string]*deployedSet // what answered the names it took over (deployed.go)
	pending  map[string]tunnel.Binding
	kick     chan struct{}            // asks the guard to check the held names now
	records  tunnel.WrittenRecords    // the Leases of runs this agent wrote, renewed every Heartbeat
	podUID   string                   // the agent pod's, for the Leases' owner reference; read once
	volumes  map[string]volumeReceipt // the volume helpers held here, by name
}

// The Platform contract. Each optional interface of tunnel/platform.go
// that this Platform has is asserted beside its method.
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
	opts.Heartbeat, opts.Stale, opts.SweepEvery = tunnel.DefaultTimes(opts.Heartbeat, opts.Stale, opts.SweepEvery)
	if opts.HandBack <= 0 {
		opts.HandBack = 10 * time.Second
	}
	if opts.ServiceAccount == "" {
		opts.ServiceAccount = "plug"
	}
	offered, err := ParseNamespaces(strings.Join(opts.Namespaces, ","), opts.Namespace)
	if err != nil {
		return nil, err
	}
	return &Platform{
		c: opts.Client, ns: opts.Namespace, pod: opts.PodName, node: opts.NodeName, ip: ip, logf: opts.Logf, times: opts,
		protected: protectedAddrs(opts), podLabels: opts.PodLabels,
		masterEnv: opts.MasterServiceEnv, offered: offered, account: opts.ServiceAccount, deployment: opts.Deployment,
		held: map[string]*holding{}, deployed: map[string]*deployedSet{}, pending: map[string]tunnel.Binding{}, kick: make(chan struct{}, 1),
	}, nil
}

// protectedAddrs are the pod's address, its node's, and the API server's
// as the agent reaches it (its Service address in a pod; a name is
// resolved now).
func protectedAddrs(opts Options) []netip.Addr {
	var out []netip.Addr
	add := func(s string) {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a.Unmap())
		}
	}
	add(opts.PodIP)
	add(opts.NodeIP)
	host, _, err := net.SplitHostPort(opts.Client.Host())
	if err != nil {
		host = opts.Client.Host()
	}
	if _, err := netip.ParseAddr(host); err == nil {
		add(host)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		addrs, _ := net.DefaultResolver.LookupHost(ctx, host)
		cancel()
		for _, a := range addrs {
			add(a)
		}
	}
	return out
}

var _ tunnel.AddressProtector = (*Platform)(nil)

// ProtectedAddrs are the addresses no run may dial through the agent: the
// agent pod's own, its node's, the API server's (as the agent reaches it,
// and the ClusterIP of the Service kubernetes of namespace default once
// WatchNames follows default), and the ClusterIPs of plug's own Services
// (tunnel.AddressProtector).
func (p *Platform) ProtectedAddrs() []netip.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append(slices.Clone(p.protected), p.ownIPs...)
}

var _ tunnel.CallerAddresser = (*Platform)(nil)

// CallerAddr is the agent pod's address (Options.PodIP), which the
// endpoints of the names it serves name: the agent listens for their
// callers there only (tunnel.CallerAddresser).
func (p *Platform) CallerAddr() netip.Addr {
	a, _ := netip.AddrFromSlice(p.ip)
	return a.Unmap()
}

// NewFromEnv returns the Platform of an agent started the way
// deploy/plug-k8s.yaml starts it: the API server and credentials of the
// pod's service account (or, outside a pod, of $KUBECONFIG or
// ~/.kube/config), and from the downward API POD_NAMESPACE, POD_NAME and
// POD_IP, HOST_IP. Its node is NODE_NAME, or else read from its pod, as
// are its labels. The variables of the kubernetes Service are the pod's
// own (MasterServiceEnv).
func NewFromEnv(ctx context.Context, logf func(format string, args ...any)) (*Platform, error) {
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
	opts := Options{Client: client, Namespace: ns, PodName: os.Getenv("POD_NAME"), PodIP: os.Getenv("POD_IP"),
		NodeName: os.Getenv("NODE_NAME"), NodeIP: os.Getenv("HOST_IP"), HelperImage: os.Getenv("PLUG_HELPER_IMAGE"), Logf: logf,
		Namespaces: []string{os.Getenv("PLUG_NAMESPACES")}, ServiceAccount: tokenAccount(), AllowShadowing: os.Getenv("PLUG_ALLOW_SHADOWING") == "true"}
	if opts.PodName != "" {
		opts.MasterServiceEnv = MasterServiceEnv(os.Environ())
		readCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		pod, err := client.Pods(ns).Get(readCtx, opts.PodName)
		cancel()
		switch {
		case err != nil && logf != nil:
			logf("cannot read the agent's own pod %s for its node and labels (%v): calls the agent makes to the names it serves may not reach it (set NODE_NAME from the downward API, spec.nodeName), and only Services labelled or annotated as plug's are known to be its own", opts.PodName, err)
		case err == nil:
			opts.PodLabels = pod.Metadata.Labels
			opts.Deployment = ownDeployment(pod.Metadata.OwnerReferences, pod.Metadata.Labels["pod-template-hash"])
			if opts.NodeName == "" {
				opts.NodeName = pod.Spec.NodeName
			}
		}
	}
	return New(opts)
}

// DialContext connects to address from inside the agent's pod: cluster DNS
// resolves the name, kube-proxy and network policy apply as to any pod,
// and the agent's dial policy to the address connected to.
func (p *Platform) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	d := net.Dialer{Control: tunnel.DialControl(ctx)}
	return d.DialContext(ctx, network, address)
}
