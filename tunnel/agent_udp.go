package tunnel

import (
	"net"

	"golang.org/x/crypto/ssh"
)

// datagrams answers a datagram channel (udp.go): the agent dials the name's
// UDP port in the cluster, within its dial policy, and relays the flow
// until it is idle for DatagramIdle or either side ends it. Each flow is
// one of the key's channels (Limits.ChannelsPerKey).
func (dc *devConn) datagrams(nc ssh.NewChannel) {
	dc.dialChannel(nc, "udp", func(ch ssh.Channel, target net.Conn) {
		if err := relayDatagrams(ch, target); err != nil {
			dc.logf("closed a UDP flow of %s (%s): %v", dc.user, dc.fingerprint, err)
		}
	})
}
