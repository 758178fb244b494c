package tunnel

import (
	"net"

	"golang.org/x/crypto/ssh"
)

// datagrams answers a datagram channel (udp.go), or a datagramLanedType
// one (lanes.go): the agent dials the name's UDP port in the cluster,
// within its dial policy, and relays the flow until it is idle for
// DatagramIdle or either side ends it. Each flow is one of the key's
// channels (Limits.ChannelsPerKey), and so is each of its lane channels.
func (dc *devConn) datagrams(nc ssh.NewChannel) {
	dc.dialChannel(nc, "udp", func(nc ssh.NewChannel, target net.Conn, id uint32, laned bool) {
		if err := dc.lanes.relayAccepted(nc, newDatagramRelay(target), id, laned, nil); err != nil {
			dc.logf("closed a UDP flow of %s (%s): %v", dc.user, dc.fingerprint, err)
		}
	})
}
