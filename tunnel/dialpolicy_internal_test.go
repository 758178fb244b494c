package tunnel

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// The address rules, on addresses no test may connect to: the protected
// ones (the node, the API server) are refused whatever name led there,
// unless PLUG_DIAL lists them alone.
func TestTheAddressRules(t *testing.T) {
	node, api := netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("fd00::1")
	cases := []struct {
		allow  string
		addr   string
		byName bool
		rule   string
	}{
		{"", "10.1.2.3", true, "protected"},
		{"", "fd00::1", true, "protected"},
		{"10.0.0.0/8", "10.1.2.3", false, "protected"},
		{"10.1.2.3/32", "10.1.2.3", false, ""},
		{"", "169.254.169.254", true, "link-local"},
		{"169.254.0.0/16", "169.254.169.254", false, "link-local"},
		{"", "fe80::1", true, "link-local"},
		{"", "0.0.0.0", true, "special"},
		{"", "224.0.0.1", true, "special"},
		{"", "::ffff:127.0.0.1", true, "loopback"},
		{"", "10.96.0.10", true, ""},
		{"", "10.96.0.10", false, "PLUG_DIAL"},
		{"10.96.0.0/12", "10.96.0.10", false, ""},
	}
	for _, tc := range cases {
		allow, err := ParseDial(tc.allow)
		if err != nil {
			t.Fatal(err)
		}
		p := &dialPolicy{allow: allow, protected: func() []netip.Addr { return []netip.Addr{node, api} }}
		var name *ClusterName
		if tc.byName {
			name = &ClusterName{Name: "web", Ports: []int{80}}
		}
		err = p.addrRule(netip.MustParseAddr(tc.addr), name)
		var refused *DialRefusedError
		switch {
		case tc.rule == "" && err != nil:
			t.Errorf("%s (PLUG_DIAL=%q, by name %t): %v", tc.addr, tc.allow, tc.byName, err)
		case tc.rule != "" && (!errors.As(err, &refused) || refused.Rule != tc.rule):
			t.Errorf("%s (PLUG_DIAL=%q, by name %t): %v, want the rule %q", tc.addr, tc.allow, tc.byName, err, tc.rule)
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "web", "10.0.0.1-10.0.0.9"} {
		if _, err := ParseDial(bad); err == nil {
			t.Errorf("ParseDial(%q) accepted it", bad)
		}
	}
}

// The API server's Service address is protected, and the name that stands
// for it (ClusterName.Protected: kubernetes.default once the operator
// offers the namespace default) reaches it, on its own port, and nothing
// else does: not another name resolving there (an ExternalName Service),
// not the address itself, not a PLUG_DIAL range around it. Without the name
// in the catalog (default not offered) the dial is refused before any
// address, saying it is no cluster name.
func TestTheNameOfTheAPIServerReachesItsAddressAlone(t *testing.T) {
	api, node := netip.MustParseAddr("10.96.0.1"), netip.MustParseAddr("192.168.1.5")
	kubernetes := ClusterName{Name: "kubernetes.default", Aliases: []string{"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		Ports: []int{443}, Protected: []netip.Addr{api}}
	offered := Catalog{Names: []ClusterName{kubernetes, {Name: "web", Ports: []int{80}}, {Name: "alias", Ports: []int{443}}}}
	cases := []struct {
		what    string
		catalog Catalog
		allow   string
		host    string
		port    int
		addr    netip.Addr // what the name resolves to
		rule    string     // "" when the dial is allowed
	}{
		{"by its name", offered, "", "kubernetes.default", 443, api, ""},
		{"by its FQDN", offered, "", "kubernetes.default.svc.cluster.local.", 443, api, ""},
		{"by its name, another port", offered, "", "kubernetes.default", 6443, api, "cluster names and their ports"},
		{"by its name, resolving to the node", offered, "", "kubernetes.default", 443, node, "protected"},
		{"by its name, resolving to loopback", offered, "", "kubernetes.default", 443, netip.MustParseAddr("127.0.0.1"), "loopback"},
		{"by another name resolving there", offered, "", "alias", 443, api, "protected"},
		{"by address", offered, "", "10.96.0.1", 443, api, "cluster names"},
		{"by address, in a PLUG_DIAL range", offered, "10.96.0.0/12", "10.96.0.1", 443, api, "protected"},
		{"by address, listed alone", offered, "10.96.0.1/32", "10.96.0.1", 443, api, ""},
		{"default not offered", Catalog{Names: offered.Names[1:]}, "", "kubernetes.default", 443, api, "cluster names"},
		{"default not offered, a PLUG_DIAL range", Catalog{Names: offered.Names[1:]}, "10.96.0.0/12", "kubernetes.default", 443, api, "protected"},
	}
	for _, tc := range cases {
		allow, err := ParseDial(tc.allow)
		if err != nil {
			t.Fatal(err)
		}
		p := &dialPolicy{allow: allow, protected: func() []netip.Addr { return []netip.Addr{api, node} }}
		name, err := p.nameRule(normalize(tc.catalog), true, "tcp", tc.host, tc.port)
		if err == nil {
			err = p.addrRule(tc.addr, name)
		}
		var refused *DialRefusedError
		switch {
		case tc.rule == "" && err != nil:
			t.Errorf("%s: %v", tc.what, err)
		case tc.rule != "" && (!errors.As(err, &refused) || refused.Rule != tc.rule):
			t.Errorf("%s: %v, want the rule %q", tc.what, err, tc.rule)
		}
	}
}

// A name no catalog lists is refused with what the Platform explains of
// it (on Kubernetes, the commands that offer its namespace); an address is
// not explained.
func TestARefusedNameIsExplained(t *testing.T) {
	p := &dialPolicy{explain: func(host string) string {
		if host == "kubernetes.default" {
			return "offer namespace default"
		}
		return ""
	}}
	c := Catalog{Names: []ClusterName{{Name: "web", Ports: []int{80}}}}
	for host, want := range map[string]string{
		"Kubernetes.Default.": "it is not one of the cluster's names: offer namespace default; a run reaches",
		"db.data":             "it is not one of the cluster's names; a run reaches",
		"10.96.0.1":           "it is not one of the cluster's names; a run reaches",
	} {
		_, err := p.nameRule(c, true, "tcp", host, 443)
		var refused *DialRefusedError
		if !errors.As(err, &refused) || !strings.HasPrefix(refused.Text, want) {
			t.Errorf("%s: %v, want a refusal starting %q", host, err, want)
		}
	}
}
