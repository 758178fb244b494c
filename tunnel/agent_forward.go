package tunnel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"golang.org/x/crypto/ssh"
)

// dialTimeout bounds the agent's dial of a cluster name for a client.
const dialTimeout = 10 * time.Second

// forward answers a tcpip-forward request: the bind address is the cluster
// name to serve. A refusal is explained on the control channel (or in a
// plain client's session) before the failure reply, which carries no text.
// filteredForwardRequest is the same with a Filter: a personal takeover.
//
// A datagramForwardRequest (udp.go) is tcpip-forward's for a UDP port.
func (dc *devConn) forward(req *ssh.Request) {
	var m forwardRequest
	var filter Filter
	var err error
	if req.Type == filteredForwardRequest {
		m, filter, err = parseFilteredForward(req.Payload)
	} else {
		err = ssh.Unmarshal(req.Payload, &m)
	}
	if err != nil {
		if m.Addr != "" {
			dc.tell(Event{Kind: EventRefused, Text: err.Error()})
		}
		req.Reply(false, nil)
		return
	}
	port := int(m.Port)
	udp := req.Type == datagramForwardRequest
	served, err := dc.serve(m.Addr, port, udp, filter)
	if err != nil {
		name := m.Addr
		if CheckName(name) != nil {
			name = ""
		}
		dc.tell(Event{Name: name, Kind: EventRefused, Text: err.Error()})
		req.Reply(false, nil)
		return
	}
	dc.tellServed(m.Addr, port, udp, served)
	req.Reply(true, nil)
}

// parseFilteredForward reads a filteredForward payload and checks its
// filter. An error after the name was read comes with the name.
func parseFilteredForward(payload []byte) (forwardRequest, Filter, error) {
	var m filteredForward
	if err := ssh.Unmarshal(payload, &m); err != nil {
		return forwardRequest{}, Filter{}, err
	}
	req := forwardRequest{Addr: m.Addr, Port: m.Port}
	var f Filter
	if len(m.Filter) > maxFilterPayload {
		return req, f, fmt.Errorf("the filter of %s is longer than %d bytes", PeerText(m.Addr), maxFilterPayload)
	}
	if err := json.Unmarshal([]byte(m.Filter), &f); err != nil {
		return req, f, fmt.Errorf("the filter of %s is not one this agent reads: %v", PeerText(m.Addr), err)
	}
	if err := f.Check(); err != nil {
		return req, f, err
	}
	if f.Empty() {
		return req, f, fmt.Errorf("the filter of %s is empty", PeerText(m.Addr))
	}
	return req, f, nil
}

func (dc *devConn) serve(name string, port int, udp bool, filter Filter) (Served, error) {
	if err := CheckName(name); err != nil {
		return Served{}, err
	}
	if err := CheckPort(port); err != nil {
		return Served{}, fmt.Errorf("cannot serve %s: %w", name, err)
	}
	if why := dc.a.refusal(); why != "" {
		return Served{}, errors.New(why)
	}
	r, err := dc.ensureRun()
	if err != nil {
		return Served{}, err
	}
	return dc.a.serveName(r, dc, name, port, udp, filter)
}

// cancelForward answers cancel-tcpip-forward, or cancelDatagramForward
// for a UDP port: the name is given back.
func (dc *devConn) cancelForward(req *ssh.Request) {
	var m forwardRequest
	ok := false
	if ssh.Unmarshal(req.Payload, &m) == nil {
		if r := dc.currentRun(); r != nil {
			ok = dc.a.cancelName(r, m.Addr, int(m.Port), req.Type == cancelDatagramForward)
		}
	}
	req.Reply(ok, nil)
}

// forwardCaller hands a caller of a served name to the client, on a
// forwarded-tcpip channel naming the name and port the client asked for,
// and carries it until it ends. It returns false, leaving c as it is, when
// the client refuses the channel (nothing answers on its local address) or
// the connection fails. A caller over the key's cap of channels is turned
// away.
func (dc *devConn) forwardCaller(b *binding, c net.Conn) bool {
	if err := dc.a.usage.take(dc.fingerprint, useChannel); err != nil {
		dc.logf("turned away a caller of %s:%d served by %s (%s): %v", b.Name, b.Port, dc.user, dc.fingerprint, err)
		c.Close()
		return true
	}
	defer dc.a.usage.give(dc.fingerprint, useChannel)
	origin, originPort := splitAddr(c.RemoteAddr())
	chanType, payload := "forwarded-tcpip", ssh.Marshal(forwardedChannel{
		Addr:       b.Name,
		Port:       uint32(b.Port),
		Origin:     origin,
		OriginPort: uint32(originPort),
	})
	what := fmt.Sprintf("a caller of %s:%d", b.Name, b.Port)
	var s *stripe
	if dc.stripes.striping() {
		s = dc.stripes.newStripe(dc.guardStalls(c, what, true))
		chanType, payload = stripeForwardedType, ssh.Marshal(stripeOpen{ID: s.id, Rest: payload})
	}
	ch, reqs, err := openChannel(dc.conn, chanType, payload)
	if err != nil {
		if s != nil {
			s.drop()
		}
		return false
	}
	go ssh.DiscardRequests(reqs)
	dc.a.routed(b, routeRun, "")
	if s != nil {
		s.carry(ch)
	} else {
		pipe(dc.guardStalls(c, what, false), ch)
	}
	return true
}

// direct answers a direct-tcpip channel, or a stripeDirectType one: the
// agent dials the address in the cluster, within its dial policy
// (dialpolicy.go), and joins the two.
func (dc *devConn) direct(nc ssh.NewChannel) {
	dc.dialChannel(nc, "tcp", func(nc ssh.NewChannel, target net.Conn, id uint32, striped bool) {
		if striped {
			dc.stripes.carryFirst(nc, id, dc.guardStalls(target, target.RemoteAddr().String(), true))
			return
		}
		if ch, ok := acceptFor(nc, target); ok {
			pipe(ch, dc.guardStalls(target, target.RemoteAddr().String(), false))
		}
	})
}

// dialChannel answers a channel that asks the agent to dial a name in the
// cluster over network ("tcp" or "udp"; its payload is direct-tcpip's, or
// a stripeOpen with it for a stripeDirectType or datagramLanedType
// channel), counted as one of the key's channels until it returns: it
// dials, within the agent's dial policy, and has carry accept the channel
// and carry the two, with the stripeOpen's id if there is one (withID), or
// rejects the channel saying why.
func (dc *devConn) dialChannel(nc ssh.NewChannel, network string, carry func(nc ssh.NewChannel, target net.Conn, id uint32, withID bool)) {
	var m directChannel
	idType, agreed, refusal := stripeDirectType, dc.stripes.striping(), "this connection said at hello that it does not stripe"
	if network == "udp" {
		idType, agreed, refusal = datagramLanedType, dc.lanes.on(), "this connection said at hello that it takes no lanes"
	}
	id, withID, ok := openPayload(nc, idType, &m)
	if !ok {
		return
	}
	if withID && !agreed {
		nc.Reject(ssh.Prohibited, refusal)
		return
	}
	if why := dc.a.refusal(); why != "" {
		nc.Reject(ssh.Prohibited, why)
		return
	}
	if _, err := dc.ensureRun(); err != nil {
		nc.Reject(ssh.ResourceShortage, err.Error())
		return
	}
	if err := dc.a.usage.take(dc.fingerprint, useChannel); err != nil {
		dc.logf("refused a connection for %s (%s): %v", dc.user, dc.fingerprint, err)
		nc.Reject(ssh.ResourceShortage, err.Error())
		return
	}
	defer dc.a.usage.give(dc.fingerprint, useChannel)
	// Not bound to the agent's life: a stopping agent carries its runs
	// until they have moved to another one.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(dc.a.ctx), dialTimeout)
	target, err := dc.a.dialForRun(ctx, network, m.Host, int(m.Port))
	cancel()
	dc.auditDial(network, m.Host, int(m.Port), err)
	var refused *DialRefusedError
	switch {
	case errors.As(err, &refused):
		dc.logf("refused a connection of %s (%s) to %s/%s: %v", dc.user, dc.fingerprint, PeerText(m.Host), network, err)
		nc.Reject(ssh.Prohibited, err.Error())
		return
	case err != nil:
		addr := net.JoinHostPort(m.Host, strconv.Itoa(int(m.Port)))
		if network == "udp" {
			addr += "/udp"
		}
		nc.Reject(ssh.ConnectionFailed, fmt.Sprintf("cannot reach %s in the cluster: %v", addr, err))
		return
	}
	carry(nc, target, id, withID)
}

// acceptFor accepts nc to carry the data of conn; the channel takes no
// requests. When nc cannot be accepted, it closes conn and returns false.
func acceptFor(nc ssh.NewChannel, conn io.Closer) (ssh.Channel, bool) {
	ch, reqs, err := acceptChannel(nc)
	if err != nil {
		conn.Close()
		return nil, false
	}
	go ssh.DiscardRequests(reqs)
	return ch, true
}

// splitAddr returns the IP and port of a TCP address, or its text and 0.
func splitAddr(addr net.Addr) (string, int) {
	if tcp, ok := addr.(*net.TCPAddr); ok {
		return tcp.IP.String(), tcp.Port
	}
	return addr.String(), 0
}
