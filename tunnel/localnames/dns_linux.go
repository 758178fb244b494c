package localnames

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// On Linux, where it can, a run answers its programs' DNS itself: the
// command's mount namespace gets a private /etc/resolv.conf whose one
// nameserver is a responder of the run (dnsServer) on a loopback address
// of its own, port 53. A cluster name gets its address and its listeners
// only when a program first looks it up, and the answer comes once they
// are open: a run's cost follows the names it uses, not the cluster's
// size. Every other name is asked of the machine's own nameservers, as
// the machine's /etc/resolv.conf lists them, with its search domains and
// options kept; the answer is passed back as it came.

// Limits of the responder.
const (
	// maxQueriesInFlight bounds the queries (and TCP connections) the
	// responder serves at once; a datagram beyond it is dropped, as a
	// busy nameserver's is, and asked again by the resolver.
	maxQueriesInFlight = 64
	// upstreamTimeout bounds the wait for one of the machine's
	// nameservers.
	upstreamTimeout = 3 * time.Second
	// tcpIdle is how long a TCP connection to the responder may be idle.
	tcpIdle = 10 * time.Second
)

// dnsServer is the run's responder: UDP and TCP on addr, port 53.
type dnsServer struct {
	lookup   LookupFunc
	search   []string         // the machine's search domains, lowercase
	upstream []netip.AddrPort // the machine's nameservers
	udp      *net.UDPConn
	tcp      *net.TCPListener
	slots    chan struct{}
	wg       sync.WaitGroup
}

// machineResolv is what the machine's resolv.conf says.
type machineResolv struct {
	servers []netip.AddrPort
	search  []string
	options []string // its options lines, as they are
}

// parseResolvConf reads a resolv.conf as glibc does: nameserver lines
// (none: 127.0.0.1), the last search or domain line, options lines;
// comments start with # or ;.
func parseResolvConf(text []byte) machineResolv {
	var m machineResolv
	sc := bufio.NewScanner(bytes.NewReader(text))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || strings.HasPrefix(f[0], "#") || strings.HasPrefix(f[0], ";") {
			continue
		}
		switch f[0] {
		case "nameserver":
			if a, err := netip.ParseAddr(f[1]); err == nil {
				m.servers = append(m.servers, netip.AddrPortFrom(a, 53))
			}
		case "search", "domain":
			m.search = nil
			for _, d := range f[1:] {
				if d = strings.ToLower(strings.TrimSuffix(d, ".")); d != "" {
					m.search = append(m.search, d)
				}
			}
		case "options":
			m.options = append(m.options, strings.Join(f, " "))
		}
	}
	if len(m.servers) == 0 {
		m.servers = []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:53")} // glibc's default
	}
	return m
}

// resolvText is the resolv.conf the command sees: the responder at addr
// as its nameserver, the machine's search domains and options.
func (m machineResolv) resolvText(label string, addr netip.Addr) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# plug run %s answers DNS here for the programs it started: the cluster's names itself, the others from this machine's own servers.\n", label)
	fmt.Fprintf(&b, "nameserver %s\n", addr)
	if len(m.search) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(m.search, " "))
	}
	for _, o := range m.options {
		b.WriteString(o + "\n")
	}
	return []byte(b.String())
}

// listenDNS starts the responder on addr, port 53.
func listenDNS(addr netip.Addr, m machineResolv, lookup LookupFunc) (*dnsServer, error) {
	at := netip.AddrPortFrom(addr, 53)
	udp, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(at))
	if err != nil {
		return nil, err
	}
	tcp, err := net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(at))
	if err != nil {
		udp.Close()
		return nil, err
	}
	s := &dnsServer{lookup: lookup, search: m.search, upstream: m.servers, udp: udp, tcp: tcp, slots: make(chan struct{}, maxQueriesInFlight)}
	s.wg.Add(2)
	go s.serveUDP()
	go s.serveTCP()
	return s, nil
}

// close stops the responder and waits for the queries it is answering.
func (s *dnsServer) close() {
	s.udp.Close()
	s.tcp.Close()
	s.wg.Wait()
}

func (s *dnsServer) serveUDP() {
	defer s.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, from, err := s.udp.ReadFromUDPAddrPort(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		select {
		case s.slots <- struct{}{}:
		default:
			continue
		}
		msg := slices.Clone(buf[:n])
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.slots }()
			if out := s.handle(msg, false); out != nil {
				s.udp.WriteToUDPAddrPort(out, from)
			}
		}()
	}
}

func (s *dnsServer) serveTCP() {
	defer s.wg.Done()
	for {
		c, err := s.tcp.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		select {
		case s.slots <- struct{}{}:
		default:
			c.Close()
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.slots }()
			defer c.Close()
			for {
				c.SetDeadline(time.Now().Add(tcpIdle))
				msg, err := readTCPMessage(c)
				if err != nil {
					return
				}
				out := s.handle(msg, true)
				if out == nil || writeTCPMessage(c, out) != nil {
					return
				}
			}
		}()
	}
}

// readTCPMessage reads one DNS message of a TCP stream: its length in two
// bytes, then it.
func readTCPMessage(r io.Reader) ([]byte, error) {
	var n [2]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	msg := make([]byte, binary.BigEndian.Uint16(n[:]))
	_, err := io.ReadFull(r, msg)
	return msg, err
}

// writeTCPMessage writes msg to a TCP stream, after its length.
func writeTCPMessage(w io.Writer, msg []byte) error {
	_, err := w.Write(binary.BigEndian.AppendUint16(nil, uint16(len(msg))))
	if err == nil {
		_, err = w.Write(msg)
	}
	return err
}

// handle answers msg, which came over TCP or UDP: a cluster name of the
// run from lookup (an A record; no record for other types), anything else
// from the machine's nameservers over the same transport (a UDP answer
// they truncate reaches the program truncated, which then asks again over
// TCP). nil: no answer.
func (s *dnsServer) handle(msg []byte, overTCP bool) []byte {
	q, err := parseQuery(msg)
	if err != nil {
		return refusal(msg)
	}
	if q.qclass == classIN && q.host != "" {
		if addr, ok := s.resolve(q.host); ok {
			if q.qtype != typeA {
				addr = netip.Addr{}
			}
			return answer(q, 0, addr)
		}
	}
	for _, server := range s.upstream {
		if out, err := ask(server, msg, q.id, overTCP); err == nil {
			return out
		}
	}
	return answer(q, rcodeServFail, netip.Addr{})
}

// resolve looks host up, and also host less one of the machine's search
// domains: a resolver tries web.corp.example before web when corp.example
// is searched, and the cluster's web answers both, as a hosts file's name
// would.
func (s *dnsServer) resolve(host string) (netip.Addr, bool) {
	if addr, ok := s.lookup(host); ok {
		return addr, true
	}
	for _, d := range s.search {
		if short, ok := strings.CutSuffix(host, "."+d); ok {
			if addr, ok := s.lookup(short); ok {
				return addr, true
			}
		}
	}
	return netip.Addr{}, false
}

// ask passes msg, a query with id, to server and returns its answer.
func ask(server netip.AddrPort, msg []byte, id uint16, overTCP bool) ([]byte, error) {
	network := "udp"
	if overTCP {
		network = "tcp"
	}
	c, err := net.DialTimeout(network, server.String(), upstreamTimeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(upstreamTimeout))
	if overTCP {
		if err := writeTCPMessage(c, msg); err != nil {
			return nil, err
		}
		out, err := readTCPMessage(c)
		if err == nil && !isResponseTo(out, id) {
			err = errMalformed
		}
		return out, err
	}
	if _, err := c.Write(msg); err != nil {
		return nil, err
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return nil, err
		}
		if isResponseTo(buf[:n], id) {
			return buf[:n], nil
		}
	}
}
