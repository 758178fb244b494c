package tunnel

import (
	"context"
	"fmt"
	"net"
	"time"

	"golang.org/x/crypto/ssh"
)

// CarryDatagrams joins c, one flow of a local program's datagrams (each
// Read of c one datagram from the program, each Write one back to it), to
// address ("name:port") in the cluster over UDP, through the agent, until
// the flow has been idle for DatagramIdle or either side ends it; then c is
// closed. When no way opens — the agent cannot reach address or does not
// carry datagrams (a *DialError), the session ended, ctx ended first —
// CarryDatagrams returns why and leaves c open.
func (s *Session) CarryDatagrams(ctx context.Context, c net.Conn, address string) error {
	r := newDatagramRelay(c)
	remote, _, err := s.open(ctx, datagramChannelType, address, nil, r)
	if err != nil {
		return err
	}
	r.carry(remote.Channel, nil)
	if remote.flow != 0 {
		defer remote.cc.lanes.remove(remote.flow)
		remote.cc.lanes.spread(remote.flow)
		remote.cc.startLanes()
	}
	r.wait()
	return nil
}

// forwardedDatagrams carries a flow of a served UDP port, which the agent
// opened on cc (over its lanes too when it gave the flow an id, lanes.go):
// the datagrams of one sender in the cluster go to the local port from a socket of the
// flow's own, and what answers that socket goes back to the sender, until
// the flow is idle for DatagramIdle or either side ends it.
func (s *Session) forwardedDatagrams(nc ssh.NewChannel, cc *clientConn) {
	var m forwardedChannel
	id, laned, ok := openPayload(nc, forwardedLanedType, &m)
	if !ok {
		return
	}
	if laned && !cc.lanes.on() {
		nc.Reject(ssh.Prohibited, "this run said at hello that it takes no lanes")
		return
	}
	f := s.lookupForward(m.Addr, int(m.Port), true)
	if f == nil {
		nc.Reject(ssh.Prohibited, fmt.Sprintf("this run does not serve %s:%d/udp", m.Addr, m.Port))
		return
	}
	local, err := net.Dial("udp", f.local)
	if err != nil {
		nc.Reject(ssh.ConnectionFailed, "cannot send to "+f.local+"/udp on the developer's machine")
		return
	}
	cc.lanes.relayAccepted(nc, newDatagramRelay(local), id, laned, cc.startLanes)
}

// startLanes opens the connection's lanes (lanes.go) in the background,
// once, if the agent takes them and the connection's round trip, once
// measured, is laneRTT or longer.
func (cc *clientConn) startLanes() {
	if cc.lanes.on() {
		cc.laning.Do(func() { go cc.openLanes() })
	}
}

// openLanes opens lanes one after the other, as many as agreed, each an
// SSH connection made as the run's own is, until one cannot be made: the
// flows go on over those there are.
func (cc *clientConn) openLanes() {
	select {
	case <-cc.measured:
	case <-cc.gone:
		return
	}
	if time.Duration(cc.stripes.minRTT.Load()) < laneRTT {
		return
	}
	for range min(cc.welcome.Lanes, maxLanes) {
		if cc.isGone() || cc.openLane() != nil {
			return
		}
	}
}

// openLane makes one lane: it connects, asks to be a lane of cc's
// connection, and takes the lane channels of its flows.
func (cc *clientConn) openLane() error {
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	var room func() <-chan struct{}
	conn, chans, reqs, abort, err := cc.s.handshakeOnce(ctx, func(b *batchConn) { room = makeLane(b) })
	if err != nil {
		return err
	}
	if !abort() {
		conn.Close()
		return context.DeadlineExceeded
	}
	ok, _, err := conn.SendRequest(laneRequest, true, ssh.Marshal(laneMsg{Token: cc.welcome.LaneToken}))
	if err == nil && !ok {
		err = errNoLane
	}
	if err == nil {
		err = cc.lanes.addLane(conn, room)
	}
	if err != nil {
		conn.Close()
		return err
	}
	go answerRequests(reqs)
	gone := make(chan struct{})
	go keepAlive(conn, cc.s.cfg.KeepAlive, gone, func(time.Duration) {})
	go func() {
		for nc := range chans {
			if nc.ChannelType() != laneJoinType {
				nc.Reject(ssh.UnknownChannelType, "a lane takes no "+nc.ChannelType()+" channels")
				continue
			}
			go cc.lanes.join(nc, room)
		}
	}()
	go func() {
		conn.Wait()
		close(gone)
		cc.lanes.dropLane(conn)
	}()
	return nil
}
