package tunnel

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// Lanes carry a run's UDP flows over more TCP connections than the run's
// own. Every datagram channel of a run crosses its one SSH connection, so
// one TCP connection: when that connection loses a segment, every
// datagram behind it waits, on every flow, until the segment is sent
// again, a round trip or more later, where a UDP path would have lost one
// datagram and delivered the rest. Over a long round trip with some loss
// that wait is most of what UDP through plug carries and loses. A lane is
// another SSH connection of the same run, made with the same key, that
// carries only datagrams: each flow has a channel on each lane besides
// its first, and each of the flow's channels takes the flow's datagrams
// whenever it is free to (datagramRelay), so a lane held up by a repair
// holds only what it already carries; while lanes carry a flow, the run's
// own connection carries none of its datagrams.
//
// Both ends must be plug and say so: the CLI's helloMsg.Lanes and the
// agent's welcomeMsg.Lanes are the most lanes each takes for a
// connection, and the smaller is the connection's limit (0, or an older
// end: none). The welcome names the connection by a LaneToken, random,
// which only the connection's client learns. A lane is a new SSH
// connection, authenticated as any other, whose first and only request is
// laneRequest with a laneMsg naming the token: the agent makes it a lane
// of that connection if the key is the connection's own, the connection
// has fewer lanes than agreed, and the new connection has done nothing
// else. A lane then takes nothing but keepalives and laneJoinType
// channels: none of its own runs, names or connections.
//
// A flow that may use lanes opens with datagramLanedType (the CLI, to a
// name of the cluster) or forwardedLanedType (the agent, a sender to a
// served name) instead of datagramChannelType or forwardedDatagramType;
// their extra data is a stripeOpen: the flow's id, chosen by the end that
// opens it (odd by the CLI, even by the agent, unique among the
// connection's flows), then the extra data of the plain channel. Once the
// peer has accepted it, the opener opens a laneJoinType channel, whose
// extra data is a laneJoin naming the flow, on each of the connection's
// lanes, and on each lane that comes later while the flow lasts. A lane
// channel carries frames as the flow's first channel does (udp.go); its
// end ends only itself, the first channel's end ends the flow. Each lane
// is one of the key's SSH connections (Limits.ConnsPerKey) and each lane
// channel one of its channels (Limits.ChannelsPerKey).
//
// The CLI opens its lanes when the run carries its first flow over a
// connection whose round trip is laneRTT or longer: on a shorter one a
// repair takes little time, and more connections would only cost CPU.
const (
	laneRequest        = "lane@plug"
	laneJoinType       = "datagram-lane@plug"
	datagramLanedType  = "datagram-laned@plug"
	forwardedLanedType = "forwarded-datagram-laned@plug"

	// maxLanes is the most lanes one connection has at this end.
	maxLanes = 3
	// laneRTT is the shortest round trip over which the CLI opens lanes.
	laneRTT = 2 * time.Millisecond
)

// laneMsg is laneRequest's payload: the token of the connection to join.
type laneMsg struct {
	Token string
}

// laneJoin is a laneJoinType channel's extra data: the flow it carries.
type laneJoin struct {
	ID uint32
}

// laneSet is the lanes and the flows of one SSH connection, at one end.
type laneSet struct {
	peerOdd bool         // the ids the peer chooses are odd (it is the CLI)
	take    func() error // counts a lane channel in the key's cap; nil: none
	give    func()

	mu     sync.Mutex
	limit  int
	closed bool
	lastID uint32
	lanes  []lane
	flows  map[uint32]*laneFlow
}

// lane is one lane of a laneSet: its SSH connection, and its room
// (batchConn.room).
type lane struct {
	conn ssh.Conn
	room func() <-chan struct{}
}

// laneFlow is a flow of a laneSet.
type laneFlow struct {
	relay  *datagramRelay
	mine   bool // this end opened it
	spread bool // its first channel is open: lanes join it
}

// newLaneSet is the lanes of a connection at the agent's end (agent) or
// the CLI's.
func newLaneSet(agent bool) *laneSet {
	t := &laneSet{peerOdd: agent, flows: map[uint32]*laneFlow{}}
	t.lastID = ^uint32(0) // the CLI's first id is 1
	if agent {
		t.lastID = 0 // the agent's is 2
	}
	return t
}

// agree sets the most lanes the connection has: the peer's, at most
// maxLanes; it returns them.
func (t *laneSet) agree(peer int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.limit = min(max(peer, 0), maxLanes)
	return t.limit
}

// on reports whether flows open with an id, for lanes.
func (t *laneSet) on() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.limit > 0
}

// add registers r, a flow this end is opening, and returns its id.
func (t *laneSet) add(r *datagramRelay) uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	for {
		t.lastID += 2
		if _, used := t.flows[t.lastID]; !used {
			t.flows[t.lastID] = &laneFlow{relay: r, mine: true}
			return t.lastID
		}
	}
}

// accept registers r under id, a flow the peer opened: an error, saying
// why, when id is not one the peer chooses or is in use.
func (t *laneSet) accept(id uint32, r *datagramRelay) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if (id%2 == 1) != t.peerOdd {
		return fmt.Errorf("flow id %d is not one this peer chooses", id)
	}
	if _, used := t.flows[id]; used {
		return fmt.Errorf("flow id %d is in use", id)
	}
	t.flows[id] = &laneFlow{relay: r, spread: true}
	return nil
}

// remove forgets flow id.
func (t *laneSet) remove(id uint32) {
	t.mu.Lock()
	delete(t.flows, id)
	t.mu.Unlock()
}

// spread opens a channel of flow id, which this end opened and the peer
// accepted, on each lane; lanes that come later get one when they come.
func (t *laneSet) spread(id uint32) {
	t.mu.Lock()
	f := t.flows[id]
	if f == nil {
		t.mu.Unlock()
		return
	}
	f.spread = true
	lanes := append([]lane(nil), t.lanes...)
	t.mu.Unlock()
	for _, l := range lanes {
		go t.open(l, id, f.relay)
	}
}

// relayAccepted accepts nc, the first channel of a flow the peer opened
// to or from r's socket, and relays the flow over it until it ends: with
// the flow's id (laned), over the lanes' channels too, calling joined once
// they may join. It returns why the flow ended when a frame was malformed.
func (t *laneSet) relayAccepted(nc ssh.NewChannel, r *datagramRelay, id uint32, laned bool, joined func()) error {
	if laned {
		if err := t.accept(id, r); err != nil {
			r.conn.Close()
			nc.Reject(ssh.Prohibited, err.Error())
			return nil
		}
		defer t.remove(id)
	}
	ch, ok := acceptFor(nc, r.conn)
	if !ok {
		return nil
	}
	r.carry(ch, nil)
	if laned && joined != nil {
		joined()
	}
	return r.wait()
}

// open opens a channel of flow id on l and carries r's datagrams on it
// too.
func (t *laneSet) open(l lane, id uint32, r *datagramRelay) {
	if t.take != nil && t.take() != nil {
		return
	}
	ch, reqs, err := openChannel(l.conn, laneJoinType, ssh.Marshal(laneJoin{ID: id}))
	if err != nil {
		t.gave()
		return
	}
	go ssh.DiscardRequests(reqs)
	r.carry(ch, &laneCarry{room: l.room, gone: t.gave})
}

// gave gives back the key's channel a lane channel took.
func (t *laneSet) gave() {
	if t.give != nil {
		t.give()
	}
}

// join answers a lane channel the peer opened on one of the lanes, whose
// room is room: it carries the flow it names, a flow of this connection,
// or is rejected.
func (t *laneSet) join(nc ssh.NewChannel, room func() <-chan struct{}) {
	var m laneJoin
	if ssh.Unmarshal(nc.ExtraData(), &m) != nil {
		nc.Reject(ssh.ConnectionFailed, "malformed "+laneJoinType+" channel")
		return
	}
	t.mu.Lock()
	f := t.flows[m.ID]
	t.mu.Unlock()
	if f == nil {
		nc.Reject(ssh.Prohibited, fmt.Sprintf("no flow %d on this connection", m.ID))
		return
	}
	if t.take != nil {
		if err := t.take(); err != nil {
			nc.Reject(ssh.ResourceShortage, err.Error())
			return
		}
	}
	ch, reqs, err := acceptChannel(nc)
	if err != nil {
		t.gave()
		return
	}
	go ssh.DiscardRequests(reqs)
	f.relay.carry(ch, &laneCarry{room: room, gone: t.gave})
}

// errNoLane is why a connection is not made a lane: the set has all the
// lanes agreed, or its connection has ended.
var errNoLane = errors.New("no more lanes for this connection")

// addLane makes conn, whose room is room, one of the connection's lanes,
// and opens a channel on it for each flow this end opened.
func (t *laneSet) addLane(conn ssh.Conn, room func() <-chan struct{}) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || len(t.lanes) >= t.limit {
		return errNoLane
	}
	l := lane{conn: conn, room: room}
	t.lanes = append(t.lanes, l)
	for id, f := range t.flows {
		if f.mine && f.spread {
			go t.open(l, id, f.relay)
		}
	}
	return nil
}

// dropLane forgets the lane of conn, which has ended.
func (t *laneSet) dropLane(conn ssh.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, l := range t.lanes {
		if l.conn == conn {
			t.lanes = append(t.lanes[:i], t.lanes[i+1:]...)
			return
		}
	}
}

// close closes every lane, when the connection has ended; no lane is
// added after.
func (t *laneSet) close() {
	t.mu.Lock()
	lanes := t.lanes
	t.lanes, t.closed = nil, true
	t.mu.Unlock()
	for _, l := range lanes {
		l.conn.Close()
	}
}

// makeLane makes b, the connection of a lane's SSH connection, keep
// little unsent in the system (keepUnsentShort) and queue its writes for a
// lane (batchConn.queueForLane); it returns the lane's room
// (batchConn.room), which its channels' pumps wait for.
func makeLane(b *batchConn) func() <-chan struct{} {
	keepUnsentShort(b.Conn)
	b.queueForLane()
	return b.room
}
