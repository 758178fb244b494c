package cli

import (
	"context"
	"net"
	"net/netip"

	"plug/tunnel"
)

// The UDP ports of the names a run consumes. A name's UDP port is a UDP
// socket on the name's loopback address; each local socket that sends to
// it is one flow (tunnel.DatagramFlows), carried over a datagram channel
// of its own (tunnel.CarryDatagrams), so that replies go back to the
// socket that sent the request. A flow ends after tunnel.DatagramIdle
// without a datagram either way.

// maxUDPFlows bounds the flows of one run at once, over all its UDP ports;
// datagrams of a new flow past it are dropped. maxUDPQueued bounds the
// bytes of their datagrams waiting to be carried, together; a datagram
// more is dropped.
const (
	maxUDPFlows  = 512
	maxUDPQueued = 64 << 20
)

// newFlowBudget is the budget of one run's UDP flows.
func newFlowBudget() *tunnel.FlowCap {
	return &tunnel.FlowCap{Max: maxUDPFlows, MaxQueued: maxUDPQueued}
}

// udpListener receives CMD's datagrams to one name's UDP port and carries
// each sender's flow to the agent, which sends them on to the name in the
// cluster.
type udpListener struct {
	flows   *tunnel.DatagramFlows
	session *tunnel.Session
	target  string
	label   string
	refused func(label string, err error)
}

// listenUDP opens addr:port/udp for target. Its errors are *listenError.
func listenUDP(addr netip.Addr, port int, s *tunnel.Session, target, label string, refused func(string, error), budget tunnel.FlowBudget) (*udpListener, error) {
	pc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, uint16(port))))
	if err != nil {
		return nil, &listenError{label: label, port: port, err: err}
	}
	ul := &udpListener{session: s, target: target, label: label, refused: refused}
	ul.flows = tunnel.NewDatagramFlows(pc, budget, ul.carry)
	return ul, nil
}

// close stops receiving and ends every flow.
func (ul *udpListener) close() { ul.flows.Close() }

// carry joins f to the name in the cluster; a refusal is told and ends f.
func (ul *udpListener) carry(f net.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), carryTimeout)
	defer cancel()
	if err := ul.session.CarryDatagrams(ctx, f, ul.target); err != nil {
		f.Close()
		ul.refused(ul.label, err)
	}
}
