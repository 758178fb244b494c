package tunnel

import (
	"context"
	"errors"
	"net"
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
		// The clouds' metadata addresses, in every form, within a wide
		// range or reached by a name, unless listed alone as dialled.
		{"fd00::/8", "fd00:ec2::254", false, "metadata"},
		{"fd00::/8", "fd00:ec2::23", false, "metadata"},
		{"", "fd00:ec2::254", true, "metadata"},
		{"fd00:ec2::254/128", "fd00:ec2::254", false, ""},
		{"fd00::/8", "fd20:ce::254", false, "metadata"},
		{"100.64.0.0/10", "100.100.100.200", false, "metadata"},
		{"", "100.100.100.200", true, "metadata"},
		{"0.0.0.0/0", "168.63.129.16", false, "metadata"},
		{"0.0.0.0/0", "192.0.0.192", false, "metadata"},
		{"::/0", "::ffff:169.254.169.254", false, "link-local"},
		{"::/0", "::169.254.169.254", false, "link-local"},
		{"::/0", "64:ff9b::169.254.169.254", false, "link-local"},
		{"::/0", "64:ff9b::100.100.100.200", false, "metadata"},
		{"", "64:ff9b::100.100.100.200", true, "metadata"},
		{"::/0", "2002:a9fe:a9fe::1", false, "link-local"},
		{"::/0", "2002:6464:64c8::", false, "metadata"},
		{"::/0", "2001:0:1:2:3:4:5601:5601", false, "link-local"},
		{"::/0", "64:ff9b::127.0.0.1", false, "loopback"},
		{"::/0", "2002:7f00:1::", false, "loopback"},
		{"::/0", "64:ff9b::10.1.2.3", false, "protected"},
		{"::/0", "64:ff9b::10.96.0.10", false, ""},
		{"64:ff9b::a9fe:a9fe/128", "64:ff9b::169.254.169.254", false, ""},
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

// A host is checked and dialled in one form: a name in lower case without
// its trailing dot (so that "web." reaches the cluster's web, as checked,
// by the search path), an address in its canonical form.
func TestTheHostCheckedIsTheHostDialled(t *testing.T) {
	for host, want := range map[string]string{
		"Web.":                   "web",
		"web.plug.svc.":          "web.plug.svc",
		"KUBERNETES.Default":     "kubernetes.default",
		"::FFFF:169.254.169.254": "::ffff:169.254.169.254",
		"FD00:EC2:0::254":        "fd00:ec2::254",
		"010.1.2.3":              "010.1.2.3", // no address: a name, refused as none of the cluster's
	} {
		if got := dialHost(host); got != want {
			t.Errorf("dialHost(%q) = %q, want %q", host, got, want)
		}
	}
	dialled := make(chan string, 1)
	a := &Agent{Platform: dialRecorder(dialled), dial: &dialPolicy{}}
	a.names.set(Catalog{Names: []ClusterName{{Name: "web", Ports: []int{80}}}})
	a.dialForRun(t.Context(), "tcp", "WEB.", 80)
	if got := <-dialled; got != "web:80" {
		t.Errorf("WEB.:80, checked as web:80, was dialled as %q", got)
	}
}

// dialRecorder is a Platform that passes on the address each dial is for,
// and connects nowhere.
type dialRecorder chan<- string

func (d dialRecorder) Serve(context.Context, Binding) (Served, error)        { return Served{}, nil }
func (d dialRecorder) Release(context.Context, Binding) error                { return nil }
func (d dialRecorder) Maintain(context.Context) error                        { return nil }
func (d dialRecorder) Rights(context.Context) ([]Right, error)               { return nil, nil }
func (d dialRecorder) WatchNames(context.Context, func([]ClusterName)) error { return nil }
func (d dialRecorder) DialContext(_ context.Context, _, address string) (net.Conn, error) {
	d <- address
	return nil, errors.New("connects nowhere")
}
