package localnames

import (
	"encoding/binary"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// upstream is a nameserver of the test on loopback: it answers every A
// query with 127.9.9.9 over UDP and TCP, truncated over UDP when
// truncate, and counts what it was asked.
type upstream struct {
	at       netip.AddrPort
	truncate bool
	mu       sync.Mutex
	asked    []string
}

func startUpstream(t *testing.T, truncate bool) *upstream {
	t.Helper()
	tcp, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	at := tcp.Addr().(*net.TCPAddr).AddrPort()
	udp, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(at))
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{at: at, truncate: truncate}
	t.Cleanup(func() { tcp.Close(); udp.Close() })
	reply := func(msg []byte, overTCP bool) []byte {
		q, err := parseQuery(msg)
		if err != nil {
			return refusal(msg)
		}
		u.mu.Lock()
		u.asked = append(u.asked, q.host)
		u.mu.Unlock()
		if u.truncate && !overTCP {
			out := answer(q, 0, netip.Addr{})
			out[2] |= 0x02 // TC
			return out
		}
		return answer(q, 0, netip.MustParseAddr("127.9.9.9"))
	}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, from, err := udp.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			udp.WriteToUDPAddrPort(reply(buf[:n], false), from)
		}
	}()
	go func() {
		for {
			c, err := tcp.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if msg, err := readTCPMessage(c); err == nil {
					writeTCPMessage(c, reply(msg, true))
				}
			}()
		}
	}()
	return u
}

func (u *upstream) questions() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.asked)
}

// startResponder starts a run's responder on a free loopback address of
// the test's pool, at port 53 (the tests run as root), asking upstream.
func startResponder(t *testing.T, up []netip.AddrPort, search []string, names map[string]netip.Addr) (*dnsServer, netip.AddrPort, *[]string) {
	t.Helper()
	pool := NewPool()
	addr, err := pool.Take()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var looked []string
	s, err := listenDNS(addr, machineResolv{servers: up, search: search}, func(host string) (netip.Addr, bool) {
		mu.Lock()
		defer mu.Unlock()
		looked = append(looked, host)
		a, ok := names[host]
		return a, ok
	})
	if IsPrivilegedPort(err) {
		t.Fatalf("port 53 cannot be bound: run the tests as root: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.close(); pool.Close() })
	return s, netip.AddrPortFrom(addr, 53), &looked
}

// exchange sends msg to the responder at over UDP or TCP and returns the
// answer.
func exchange(t *testing.T, at netip.AddrPort, msg []byte, overTCP bool) []byte {
	t.Helper()
	network := "udp"
	if overTCP {
		network = "tcp"
	}
	c, err := net.Dial(network, at.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if overTCP {
		if err := writeTCPMessage(c, msg); err != nil {
			t.Fatal(err)
		}
		out, err := readTCPMessage(c)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

// answerAddr is the address of the A record that ends an answer, if any,
// and its rcode.
func answerAddr(t *testing.T, out []byte) (netip.Addr, int) {
	t.Helper()
	if len(out) < dnsHeaderLen || out[2]&0x80 == 0 {
		t.Fatalf("not a response: % x", out)
	}
	rcode := int(out[3] & 0xF)
	if binary.BigEndian.Uint16(out[6:]) == 0 {
		return netip.Addr{}, rcode
	}
	return netip.AddrFrom4([4]byte(out[len(out)-4:])), rcode
}

// TestResponderAnswersTheRunsNames: the run's names answer, in any case,
// with a search domain of the machine's after them too; other types of a
// run's name answer with no record; both over UDP and TCP.
func TestResponderAnswersTheRunsNames(t *testing.T) {
	web := netip.MustParseAddr("127.64.3.4")
	up := startUpstream(t, false)
	_, at, _ := startResponder(t, []netip.AddrPort{up.at}, []string{"corp.example"}, map[string]netip.Addr{"web": web, "web.shop.svc.cluster.local": web})
	for _, overTCP := range []bool{false, true} {
		for _, name := range []string{"web", "WEB", "web.corp.example", "web.shop.svc.cluster.local"} {
			if addr, rcode := answerAddr(t, exchange(t, at, query(9, name, typeA, true), overTCP)); addr != web || rcode != 0 {
				t.Errorf("tcp %v: %s answered %v, rcode %d; want %v", overTCP, name, addr, rcode, web)
			}
		}
		if addr, rcode := answerAddr(t, exchange(t, at, query(9, "web", 28, false), overTCP)); addr.IsValid() || rcode != 0 {
			t.Errorf("tcp %v: AAAA of web answered %v, rcode %d; want no record", overTCP, addr, rcode)
		}
	}
	if asked := up.questions(); len(asked) != 0 {
		t.Errorf("the machine's nameserver was asked %v", asked)
	}
}

// TestResponderForwardsOtherNames: a name that is not the run's is asked
// of the machine's nameserver and its answer passed on; a truncated UDP
// answer reaches the program truncated, which asks again over TCP; with
// no nameserver answering, SERVFAIL; a malformed query gets FORMERR.
func TestResponderForwardsOtherNames(t *testing.T) {
	up := startUpstream(t, false)
	_, at, looked := startResponder(t, []netip.AddrPort{up.at}, nil, map[string]netip.Addr{})
	for _, overTCP := range []bool{false, true} {
		if addr, rcode := answerAddr(t, exchange(t, at, query(5, "db.example", typeA, false), overTCP)); addr != netip.MustParseAddr("127.9.9.9") || rcode != 0 {
			t.Errorf("tcp %v: db.example answered %v, rcode %d; want the machine's nameserver's 127.9.9.9", overTCP, addr, rcode)
		}
	}
	if asked := up.questions(); !slices.Equal(asked, []string{"db.example", "db.example"}) || !slices.Contains(*looked, "db.example") {
		t.Errorf("the machine's nameserver was asked %v, the run %v", asked, *looked)
	}

	truncating := startUpstream(t, true)
	_, at, _ = startResponder(t, []netip.AddrPort{truncating.at}, nil, nil)
	out := exchange(t, at, query(6, "big.example", typeA, false), false)
	if out[2]&0x02 == 0 {
		t.Errorf("the truncated answer lost its TC bit: % x", out)
	}
	if addr, _ := answerAddr(t, exchange(t, at, query(6, "big.example", typeA, false), true)); addr != netip.MustParseAddr("127.9.9.9") {
		t.Errorf("over TCP, big.example answered %v", addr)
	}

	closed, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	gone := closed.LocalAddr().(*net.UDPAddr).AddrPort()
	closed.Close()
	_, at, _ = startResponder(t, []netip.AddrPort{gone}, nil, nil)
	if _, rcode := answerAddr(t, exchange(t, at, query(7, "db.example", typeA, false), false)); rcode != rcodeServFail {
		t.Errorf("with no nameserver answering, rcode %d; want SERVFAIL", rcode)
	}
	bad := query(8, "web", typeA, false)
	bad[5] = 2
	if _, rcode := answerAddr(t, exchange(t, at, bad, false)); rcode != rcodeFormErr {
		t.Errorf("a query of two questions: rcode %d; want FORMERR", rcode)
	}
}

// TestResolvConf: the command's resolv.conf names the responder, and keeps
// the machine's search domains and options.
func TestResolvConf(t *testing.T) {
	m := parseResolvConf([]byte("# generated\nnameserver 10.0.0.2\nnameserver ::1\nsearch Corp.Example. lab.example\noptions edns0 trust-ad\n; comment\nnameserver bogus\n"))
	if !slices.Equal(m.servers, []netip.AddrPort{netip.MustParseAddrPort("10.0.0.2:53"), netip.MustParseAddrPort("[::1]:53")}) || !slices.Equal(m.search, []string{"corp.example", "lab.example"}) {
		t.Fatalf("read %+v", m)
	}
	if none := parseResolvConf(nil); !slices.Equal(none.servers, []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:53")}) {
		t.Errorf("without nameserver lines, the servers are %v; want 127.0.0.1:53, as glibc's", none.servers)
	}
	text := string(m.resolvText("pid 1", netip.MustParseAddr("127.64.0.9")))
	want := "nameserver 127.64.0.9\nsearch corp.example lab.example\noptions edns0 trust-ad\n"
	if _, rest, _ := strings.Cut(text, "\n"); rest != want {
		t.Errorf("resolv.conf:\n%s\nwant after its comment:\n%s", text, want)
	}
}

// TestNsswitchDecidesTheMode: a run answers DNS only where the hosts line
// of nsswitch.conf reaches DNS for every name the hosts file lacks.
func TestNsswitchDecidesTheMode(t *testing.T) {
	for line, asks := range map[string]bool{
		"hosts: files dns":                                      true,
		"hosts:          files myhostname dns":                  true,
		"passwd: files\n# no hosts line":                        true,
		"hosts: files mdns4_minimal [NOTFOUND=return] dns":      false,
		"hosts: resolve [!UNAVAIL=return] files myhostname dns": false,
		"hosts: files": false,
	} {
		if err := nsswitchHostsAskDNS([]byte(line + "\n")); (err == nil) != asks {
			t.Errorf("%q: %v; want asks DNS %v", line, err, asks)
		}
	}
}
