package tunnel

import (
	"net"

	"golang.org/x/crypto/ssh"
)

// A name's UDP port that a run serves: the agent's UDP socket for it takes
// the datagrams the cluster sends the name, each sender one flow
// (DatagramFlows), carried to the run on a forwarded-datagram channel
// (udp.go) until the flow is idle for DatagramIdle. Each flow is one of
// the key's channels (Limits.ChannelsPerKey): the datagrams of a sender
// that would start a flow past the cap are dropped. While the run cannot
// take a flow — it is away, or the name is being given back — its
// datagrams are dropped too: UDP has no refusal to send, and the deployed
// service is not dialled for them.

// keyChannels is the FlowBudget of a key's served UDP flows: its channels,
// and the bytes of their datagrams waiting (holdings).
type keyChannels struct {
	a   *Agent
	key string
}

func (a *Agent) flowBudget(key string) FlowBudget { return keyChannels{a: a, key: key} }

func (k keyChannels) Take() bool {
	if err := k.a.usage.take(k.key, useChannel); err != nil {
		k.a.plog.printf(k.key, "dropped the datagrams of a new UDP flow to a name served by %s: %v", k.key, err)
		return false
	}
	return true
}

func (k keyChannels) Give() { k.a.usage.give(k.key, useChannel) }

func (k keyChannels) Hold(n int) bool {
	if err := k.a.held.hold(k.key, n); err != nil {
		k.a.plog.printf(k.key, "dropped a datagram to a name served by %s: %v", k.key, err)
		return false
	}
	return true
}

func (k keyChannels) Release(n int) { k.a.held.release(k.key, n) }

// answerFlow hands a flow of b's UDP port to the run's client, or ends it
// (its datagrams dropped) when the run cannot take it.
func (a *Agent) answerFlow(b *binding, f net.Conn) {
	why := b.toRun(func(dc *devConn) bool { return dc.forwardFlow(b, f) }, "its client does not take the datagrams")
	if why == "" {
		return
	}
	a.routed(b, routeRefused, why)
	f.Close()
}

// forwardFlow carries flow f of b's UDP port to the client, on a
// forwarded-datagram channel naming the name and port the client asked
// for and the sender (a forwardedLanedType one, with the flow's id, when
// the connection takes lanes), until the flow ends. False, leaving f open,
// when the client refuses the channel or the connection fails.
func (dc *devConn) forwardFlow(b *binding, f net.Conn) bool {
	from := f.RemoteAddr().(*net.UDPAddr)
	typ, payload := forwardedDatagramType, ssh.Marshal(forwardedChannel{
		Addr:       b.Name,
		Port:       uint32(b.Port),
		Origin:     from.IP.String(),
		OriginPort: uint32(from.Port),
	})
	r := newDatagramRelay(f)
	var id uint32
	if dc.lanes.on() {
		id = dc.lanes.add(r)
		defer dc.lanes.remove(id)
		typ, payload = forwardedLanedType, ssh.Marshal(stripeOpen{ID: id, Rest: payload})
	}
	ch, reqs, err := openChannel(dc.conn, typ, payload)
	if err != nil {
		return false
	}
	go ssh.DiscardRequests(reqs)
	dc.a.routed(b, routeRun, "")
	r.carry(ch, nil)
	if typ == forwardedLanedType {
		dc.lanes.spread(id)
	}
	if err := r.wait(); err != nil {
		dc.logf("closed a UDP flow to %s:%d/udp served by %s (%s): %v", b.Name, b.Port, dc.user, dc.fingerprint, err)
	}
	return true
}
