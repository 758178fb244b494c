package tunnel

import (
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// A socket bound to every address of the machine (the agent's UDP port of
// a served name) must answer a sender from the address the sender wrote
// to: a reply from another address of the machine (the kernel picks the
// source of the route back) is not the flow the sender's conntrack entry
// knows — behind a Service's DNAT its reply is not translated back, and the
// sender's connected socket drops it. On Linux the socket reports each
// datagram's destination (IP_PKTINFO, IPV6_PKTINFO), and replies name it
// as their source.

// reportDestinations asks pc to tell each datagram's destination address.
// Failing that, replies go from the address the kernel picks.
func reportDestinations(pc *net.UDPConn) {
	setSockopt(pc, unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
	setSockopt(pc, unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
}

// replyControl is the control message that sends a reply from the
// destination oob (a datagram's control messages) reports; nil when it
// reports none.
func replyControl(oob []byte) []byte {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	for _, m := range msgs {
		switch {
		case m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_PKTINFO && len(m.Data) >= unix.SizeofInet4Pktinfo:
			var info unix.Inet4Pktinfo
			copy(info.Spec_dst[:], m.Data[8:12]) // the header's destination address
			return unix.PktInfo4(&info)
		case m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_PKTINFO && len(m.Data) >= unix.SizeofInet6Pktinfo:
			var info unix.Inet6Pktinfo
			copy(info.Addr[:], m.Data[:16])
			if netip.AddrFrom16(info.Addr).IsLinkLocalUnicast() {
				return nil // its scope would need the interface too
			}
			return unix.PktInfo6(&info)
		}
	}
	return nil
}

// controlSpace is the room the control messages of replyControl take.
var controlSpace = unix.CmsgSpace(unix.SizeofInet6Pktinfo) + unix.CmsgSpace(unix.SizeofInet4Pktinfo)
