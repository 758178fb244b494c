package tunnel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// The dial policy decides what a run may reach through the agent (ssh -L,
// plug -c, a run's own connections). By default a run reaches the
// cluster's names, as the Platform's WatchNames lists them (Services; Swarm
// service names and aliases), on their ports, and nothing else: not an
// address given as such, not a name of a namespace the operator has not
// offered (the Platform's ExplainName says how to offer it). The operator
// widens it with address ranges (PLUG_DIAL, Agent.Dial): a run may then
// also dial any address in them, by address or by a name that resolves
// into them.
//
// Whatever a name resolves to, some addresses stay refused: loopback (the
// agent's own ports), link-local (169.254.0.0/16 and fe80::/10, where
// clouds answer for their metadata and credentials), the clouds' metadata
// addresses outside it (metadataAddrs: fd00:ec2::254, 100.100.100.200...),
// unspecified and multicast addresses, and the ones the Platform protects
// (ProtectedAddrs: the node's, the API server's, the agent's own, plug's
// own Services'). An IPv6 address that carries an IPv4 address
// (IPv4-mapped ::ffff:a.b.c.d, IPv4-compatible ::a.b.c.d, NAT64
// 64:ff9b::a.b.c.d, 6to4 2002:aabb:ccdd::, Teredo 2001::/32) is refused as
// the IPv4 address it carries is. Only an entry of PLUG_DIAL that names
// such an address alone (a /32 or /128), in the form dialled, allows it;
// a wider range does not. A cluster name
// may stand for a protected address (ClusterName.Protected: kubernetes.default
// for the API server's Service address, once the operator offers the
// namespace default): a run reaches that address by that name, on the
// name's ports, and still by no other name, range or address. The agent
// adds nothing to such a connection: it carries bytes, and TLS runs end to
// end between the run's program and the API server, with the developer's
// own credentials or none. The addresses are checked on the
// connection as it is made, after DNS, so that a name that resolves
// somewhere else by the time it is dialled (DNS rebinding) is still
// refused.

// metadataAddrs are where clouds answer for an instance's metadata and
// credentials, besides the link-local ones: AWS's IMDS and EKS Pod
// Identity over IPv6, Google Cloud's over IPv6, Alibaba Cloud's, Azure's
// WireServer, Oracle Cloud's legacy one. The link-local ones
// (169.254.169.254 of AWS, Google, Azure, Oracle, DigitalOcean,
// OpenStack...; 169.254.170.2 and 169.254.170.23 of AWS's containers) are
// refused as link-local.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("fd00:ec2::254"),
	netip.MustParseAddr("fd00:ec2::23"),
	netip.MustParseAddr("fd20:ce::254"),
	netip.MustParseAddr("100.100.100.200"),
	netip.MustParseAddr("168.63.129.16"),
	netip.MustParseAddr("192.0.0.192"),
}

// The IPv6 prefixes whose addresses carry an IPv4 address.
var (
	nat64Prefix  = netip.MustParsePrefix("64:ff9b::/96")
	compatPrefix = netip.MustParsePrefix("::/96")
	sixToFour    = netip.MustParsePrefix("2002::/16")
	teredoPrefix = netip.MustParsePrefix("2001::/32")
)

// carried is the IPv4 address an IPv6 address ip carries, with the name of
// the form, if it does: NAT64, IPv4-compatible, 6to4 or Teredo (whose
// client address is inverted). IPv4-mapped addresses are unmapped before.
func carried(ip netip.Addr) (netip.Addr, string, bool) {
	if !ip.Is6() {
		return netip.Addr{}, "", false
	}
	b := ip.As16()
	switch {
	case nat64Prefix.Contains(ip):
		return netip.AddrFrom4([4]byte(b[12:])), "NAT64", true
	case compatPrefix.Contains(ip) && !ip.IsUnspecified() && !ip.IsLoopback():
		return netip.AddrFrom4([4]byte(b[12:])), "IPv4-compatible", true
	case sixToFour.Contains(ip):
		return netip.AddrFrom4([4]byte(b[2:6])), "6to4", true
	case teredoPrefix.Contains(ip):
		return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}), "Teredo", true
	}
	return netip.Addr{}, "", false
}

// DialRefusedError is a dial the agent's policy refuses: Rule names the
// rule, Text says what to do.
type DialRefusedError struct {
	Address string // what was dialled, "host:port" or the address connected to
	Rule    string // "cluster names", "loopback", "link-local", "protected", "PLUG_DIAL"...
	Text    string
}

func (e *DialRefusedError) Error() string {
	return fmt.Sprintf("the agent's dial policy refuses %s (rule: %s): %s", e.Address, e.Rule, e.Text)
}

// ParseDial reads PLUG_DIAL: address ranges (CIDR, or single addresses)
// separated by commas or spaces. An empty string is no range.
func ParseDial(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
		p, err := netip.ParsePrefix(f)
		if err != nil {
			a, aerr := netip.ParseAddr(f)
			if aerr != nil {
				return nil, fmt.Errorf("PLUG_DIAL: %q is neither an address range (10.0.0.0/8, fd00::/8) nor an address", f)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// dialPolicy is the policy of one agent.
type dialPolicy struct {
	allow     []netip.Prefix      // PLUG_DIAL
	protected func() []netip.Addr // the Platform's ProtectedAddrs; nil for none
	explain   func(string) string // the Platform's ExplainName (NameNoter); nil for none
}

// dialHost is host as a run's dial is checked and made: a name in lower
// case without its trailing dot, or an address in its canonical form. The
// policy checks this form and the platform dials it, so that what is
// checked is what is dialled.
func dialHost(host string) string {
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.String()
	}
	return strings.ToLower(strings.TrimSuffix(host, "."))
}

// nameRule checks host:port, in the form dialHost makes, before anything
// is dialled: it returns the cluster's name host is (nil if none), and
// refuses what the policy does not let a run dial at all. network is "tcp"
// or "udp": a name's ports of that protocol are the ones it may be dialled
// on.
func (p *dialPolicy) nameRule(c Catalog, known bool, network, host string, port int) (byName *ClusterName, err error) {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	name := dialHost(host)
	_, err = netip.ParseAddr(host)
	isName := err != nil // a name, not an address
	if isName {
		for _, n := range c.Names {
			if n.Name != name && !slices.Contains(n.Aliases, name) {
				continue
			}
			ports := n.Ports
			if network == "udp" {
				ports = n.UDPPorts
			}
			if len(n.Ports) == 0 && len(n.UDPPorts) == 0 || slices.Contains(ports, port) {
				return &n, nil
			}
			if len(p.allow) == 0 {
				return nil, &DialRefusedError{Address: addr, Rule: "cluster names and their ports",
					Text: fmt.Sprintf("%s answers on %s port %s, not %d", n.Name, strings.ToUpper(network), joinPorts(ports), port)}
			}
		}
	}
	if len(p.allow) > 0 {
		return nil, nil // checked on the address connected to
	}
	why := "it is not one of the cluster's names"
	if p.explain != nil && isName {
		if more := p.explain(name); more != "" {
			why += ": " + more
		}
	}
	if !known {
		why = "the agent does not know the cluster's names yet; try again in a moment"
	} else if c.Unavailable != "" {
		why = "the agent cannot tell the cluster's names right now (" + c.Unavailable + ")"
	} else if len(c.Notes) > 0 {
		why += " (the agent says: " + strings.Join(c.Notes, "; ") + ")"
	}
	return nil, &DialRefusedError{Address: addr, Rule: "cluster names",
		Text: why + "; a run reaches the cluster's names (Services, Swarm services and their aliases) on their ports, and the addresses the cluster admin allows with PLUG_DIAL"}
}

// addrRule checks the address a connection is about to be made to: one
// the cluster's name byName resolved to, or (byName nil) any other.
func (p *dialPolicy) addrRule(ip netip.Addr, byName *ClusterName) error {
	ip = ip.Unmap()
	alone := slices.ContainsFunc(p.allow, func(a netip.Prefix) bool { return a.IsSingleIP() && a.Addr() == ip })
	if alone {
		return nil
	}
	if err := p.specialRule(ip, ip, "", byName); err != nil {
		return err
	}
	if v4, form, ok := carried(ip); ok {
		if err := p.specialRule(ip, v4, form, byName); err != nil {
			return err
		}
	}
	if byName != nil || slices.ContainsFunc(p.allow, func(a netip.Prefix) bool { return a.Contains(ip) }) {
		return nil
	}
	return &DialRefusedError{Address: ip.String(), Rule: "PLUG_DIAL",
		Text: "it is in none of the ranges the cluster admin allows with PLUG_DIAL"}
}

// specialRule refuses ip, dialled, when the address a is one no range
// unlocks: a is ip itself, or (form naming how) the IPv4 address ip
// carries.
func (p *dialPolicy) specialRule(ip, a netip.Addr, form string, byName *ClusterName) error {
	refuse := func(rule, what string) error {
		if form != "" {
			what = fmt.Sprintf("it carries %s (as %s): %s", a, form, strings.TrimPrefix(what, "it "))
		}
		return &DialRefusedError{Address: ip.String(), Rule: rule,
			Text: what + ", which runs may not reach through the agent unless the cluster admin lists this address alone in PLUG_DIAL"}
	}
	switch {
	case a.IsLoopback():
		return refuse("loopback", "it is a loopback address, the agent's own")
	case a.IsLinkLocalUnicast():
		return refuse("link-local", "it is a link-local address (where clouds answer for their metadata and credentials)")
	case slices.Contains(metadataAddrs, a):
		return refuse("metadata", "it is where a cloud answers for its instances' metadata and credentials")
	case a.IsUnspecified() || a.IsMulticast() || a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast():
		return refuse("special", "it is not an address of a host")
	case p.protected != nil && slices.Contains(p.protected(), a):
		if form == "" && byName != nil && slices.Contains(byName.Protected, a) {
			return nil // the address the name stands for
		}
		return refuse("protected", "it is the node's, the API server's or the agent's own address")
	}
	return nil
}

// control is a net.Dialer Control that applies addrRule.
func (p *dialPolicy) control(byName *ClusterName) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return &DialRefusedError{Address: address, Rule: "special", Text: "not an IP address and port"}
		}
		return p.addrRule(ap.Addr(), byName)
	}
}

type dialControlKey struct{}

// DialControl is the Control a Platform's DialContext must give the
// net.Dialer it connects with, so that the agent's dial policy applies to
// the address actually connected to: it refuses with a
// *DialRefusedError what the policy refuses. It is nil when ctx carries no
// policy (the Platform's own dials, e.g. the path proof's).
func DialControl(ctx context.Context) func(network, address string, c syscall.RawConn) error {
	f, _ := ctx.Value(dialControlKey{}).(func(network, address string, c syscall.RawConn) error)
	return f
}

// withDialControl returns ctx carrying control for the Platform's
// DialContext.
func withDialControl(ctx context.Context, control func(network, address string, c syscall.RawConn) error) context.Context {
	return context.WithValue(ctx, dialControlKey{}, control)
}

// dialForRun dials host:port over network ("tcp" or "udp") for a run,
// within the agent's dial policy.
func (a *Agent) dialForRun(ctx context.Context, network, host string, port int) (net.Conn, error) {
	host = dialHost(host)
	c, known, _ := a.names.get()
	byName, err := a.dial.nameRule(c, known, network, host, port)
	if err != nil {
		return nil, err
	}
	ctx = withDialControl(ctx, a.dial.control(byName))
	conn, err := a.Platform.DialContext(ctx, network, net.JoinHostPort(host, strconv.Itoa(port)))
	var refused *DialRefusedError
	if errors.As(err, &refused) {
		refused.Address = net.JoinHostPort(host, strconv.Itoa(port)) + " (" + refused.Address + ")"
		return nil, refused
	}
	return conn, err
}

func joinPorts(ports []int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	if len(s) > 8 {
		s = append(s[:8], "...")
	}
	return strings.Join(s, ", ")
}
