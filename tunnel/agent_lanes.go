package tunnel

import (
	"errors"

	"golang.org/x/crypto/ssh"
)

// becomeLane answers a lane request (lanes.go): the connection becomes a
// lane of the connection whose token it names, if that connection is the
// same key's and may have one more, and this one has carried nothing yet.
// A connection refused is closed: it has nothing else to do.
func (dc *devConn) becomeLane(req *ssh.Request) {
	err := dc.joinLane(req.Payload)
	req.Reply(err == nil, nil)
	if err != nil {
		dc.logf("refused a lane of %s (%s) from %s: %v", dc.user, dc.fingerprint, dc.conn.RemoteAddr(), err)
		if dc.role.Load() == roleLane {
			dc.conn.Close()
		}
	}
}

func (dc *devConn) joinLane(payload []byte) error {
	var m laneMsg
	if ssh.Unmarshal(payload, &m) != nil {
		return errors.New("malformed lane request")
	}
	v, _ := dc.a.lanes.Load(m.Token)
	main, _ := v.(*devConn)
	if main == nil || main.fingerprint != dc.fingerprint {
		return errors.New("no connection of this key has that lane token")
	}
	if !dc.claim(roleLane) {
		return errors.New("this connection carries a run: it cannot be a lane")
	}
	dc.mu.Lock()
	if dc.laneOf != nil {
		dc.mu.Unlock()
		return errors.New("this connection is a lane already")
	}
	dc.laneOf = main
	dc.laneRoom = makeLane(dc.raw)
	room := dc.laneRoom
	dc.mu.Unlock()
	return main.lanes.addLane(dc.conn, room)
}

// joinFlow answers a lane channel: on a lane, the peer's channel of one of
// its connection's flows; elsewhere it is refused.
func (dc *devConn) joinFlow(nc ssh.NewChannel) {
	dc.mu.Lock()
	main, room := dc.laneOf, dc.laneRoom
	dc.mu.Unlock()
	if main == nil {
		nc.Reject(ssh.Prohibited, "this connection is not a lane")
		return
	}
	go main.lanes.join(nc, room)
}

// endLanes, when the connection has ended, closes its lanes and forgets
// its token; or, for a lane, takes it out of its connection's lanes.
func (dc *devConn) endLanes() {
	if dc.laneToken != "" {
		dc.a.lanes.Delete(dc.laneToken)
	}
	dc.lanes.close()
	dc.mu.Lock()
	main := dc.laneOf
	dc.mu.Unlock()
	if main != nil {
		main.lanes.dropLane(dc.conn)
	}
}
