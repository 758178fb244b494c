package tunnel

import (
	"context"
	"errors"
	"fmt"
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
func (dc *devConn) forward(req *ssh.Request) {
	var m forwardRequest
	if err := ssh.Unmarshal(req.Payload, &m); err != nil {
		req.Reply(false, nil)
		return
	}
	port := int(m.Port)
	served, err := dc.serve(m.Addr, port)
	if err != nil {
		name := m.Addr
		if CheckName(name) != nil {
			name = ""
		}
		dc.tell(Event{Name: name, Kind: EventRefused, Text: err.Error()})
		req.Reply(false, nil)
		return
	}
	dc.tellServed(m.Addr, port, served)
	req.Reply(true, nil)
}

func (dc *devConn) serve(name string, port int) (Served, error) {
	if err := CheckName(name); err != nil {
		return Served{}, err
	}
	if err := CheckPort(port); err != nil {
		return Served{}, fmt.Errorf("cannot serve %s: %w", name, err)
	}
	if why := dc.a.refusal(); why != "" {
		return Served{}, errors.New(why)
	}
	r := dc.ensureRun()
	if r == nil {
		return Served{}, errAgentStopping
	}
	return dc.a.serveName(r, dc, name, port)
}

// cancelForward answers cancel-tcpip-forward: the name is given back.
func (dc *devConn) cancelForward(req *ssh.Request) {
	var m forwardRequest
	ok := false
	if ssh.Unmarshal(req.Payload, &m) == nil {
		if r := dc.currentRun(); r != nil {
			ok = dc.a.cancelName(r, m.Addr, int(m.Port))
		}
	}
	req.Reply(ok, nil)
}

// forwardCaller hands a caller of a served name to the client, on a
// forwarded-tcpip channel naming the name and port the client asked for.
func (dc *devConn) forwardCaller(b *binding, c net.Conn) {
	origin, originPort := splitAddr(c.RemoteAddr())
	ch, reqs, err := dc.conn.OpenChannel("forwarded-tcpip", ssh.Marshal(forwardedChannel{
		Addr:       b.Name,
		Port:       uint32(b.Port),
		Origin:     origin,
		OriginPort: uint32(originPort),
	}))
	if err != nil {
		c.Close()
		return
	}
	go ssh.DiscardRequests(reqs)
	pipe(c, ch)
}

// direct answers a direct-tcpip channel: the agent dials the address in the
// cluster and joins the two.
func (dc *devConn) direct(nc ssh.NewChannel) {
	var m directChannel
	if err := ssh.Unmarshal(nc.ExtraData(), &m); err != nil {
		nc.Reject(ssh.ConnectionFailed, "malformed direct-tcpip request")
		return
	}
	if why := dc.a.refusal(); why != "" {
		nc.Reject(ssh.Prohibited, why)
		return
	}
	if dc.ensureRun() == nil {
		nc.Reject(ssh.ResourceShortage, errAgentStopping.Error())
		return
	}
	addr := net.JoinHostPort(m.Host, strconv.Itoa(int(m.Port)))
	ctx, cancel := context.WithTimeout(dc.a.ctx, dialTimeout)
	target, err := dc.a.Platform.DialContext(ctx, "tcp", addr)
	cancel()
	if err != nil {
		nc.Reject(ssh.ConnectionFailed, fmt.Sprintf("cannot reach %s in the cluster: %v", addr, err))
		return
	}
	ch, reqs, err := nc.Accept()
	if err != nil {
		target.Close()
		return
	}
	go ssh.DiscardRequests(reqs)
	pipe(ch, target)
}

// splitAddr returns the IP and port of a TCP address, or its text and 0.
func splitAddr(addr net.Addr) (string, int) {
	if tcp, ok := addr.(*net.TCPAddr); ok {
		return tcp.IP.String(), tcp.Port
	}
	return addr.String(), 0
}
