package tunnel

import (
	"context"
	"fmt"
	"net"

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
	remote, _, err := s.open(ctx, datagramChannelType, address, nil)
	if err != nil {
		return err
	}
	relayDatagrams(remote.Channel, c)
	return nil
}

// forwardedDatagrams carries a flow of a served UDP port: the datagrams of
// one sender in the cluster go to the local port from a socket of the
// flow's own, and what answers that socket goes back to the sender, until
// the flow is idle for DatagramIdle or either side ends it.
func (s *Session) forwardedDatagrams(nc ssh.NewChannel) {
	var m forwardedChannel
	if err := ssh.Unmarshal(nc.ExtraData(), &m); err != nil {
		nc.Reject(ssh.ConnectionFailed, "malformed "+forwardedDatagramType+" channel")
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
	if ch, ok := acceptFor(nc, local); ok {
		relayDatagrams(ch, local)
	}
}
