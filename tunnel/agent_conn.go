package tunnel

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
)

// devConn is one authenticated developer connection: a plug CLI or a plain
// OpenSSH client.
type devConn struct {
	a            *Agent
	conn         *ssh.ServerConn
	raw          *batchConn // the connection conn runs on
	fingerprint  string
	user         string        // the SSH user name, escaped (PeerText)
	key          ssh.PublicKey // the key it authenticated with
	gone         chan struct{} // closed once the connection is closed
	read         chan struct{} // closed after gone, once what the client sent is read
	moveAnswered chan struct{} // closed when the client said moved (handOver)
	moveOnce     sync.Once
	namesAsked   chan struct{} // closed when the client asked for the catalog (namesMsg)
	namesOnce    sync.Once
	events       chan Event // platform events, told by one goroutine

	runMu       sync.Mutex // held while the run is chosen
	run         *run
	helloAtOpen bool // the control channel's open carried a hello
	helloEchoed bool // the copy of it sent on the channel was passed over

	busy       atomic.Bool // a question (status, who, end) is being answered
	lastStatus time.Time   // when the last status was asked; read and written while busy is held

	mu      sync.Mutex
	movedTo string       // the agent the client said its run moved to ("": it could not move)
	control *controlConn // plug's control channel, if the client opened one
	notices *notices     // a plain OpenSSH client's session, if it opened one
	unsaid  []string     // lines for a session not opened yet

	stripes *stripeTable // its striped connections (stripe.go)

	// Lanes (lanes.go): a connection carries a run and may have lanes, or
	// is a lane of another connection, and then carries nothing else.
	role      atomic.Int32           // roleAny until it does either
	lanes     *laneSet               // its lanes and its flows that use them
	laneToken string                 // names it to its lanes; set with the welcome
	laneOf    *devConn               // the connection this one is a lane of; set under mu
	laneRoom  func() <-chan struct{} // a lane's room (makeLane); set with laneOf
}

// A connection's role, once it has one: it carries a run (or an OpenSSH
// client's forwards and sessions), or it is a lane.
const (
	roleAny int32 = iota
	roleRun
	roleLane
)

// claimFor claims the run's role for req, a request of a run's; if the
// connection is a lane, it refuses req and returns false.
func (dc *devConn) claimFor(req *ssh.Request) bool {
	if dc.claim(roleRun) {
		return true
	}
	req.Reply(false, nil)
	return false
}

// claim gives the connection role, unless it has the other.
func (dc *devConn) claim(role int32) bool {
	return dc.role.CompareAndSwap(roleAny, role) || dc.role.Load() == role
}

// closeAfterEndedWait is how long a client told its run ended has to close
// the connection itself before the agent closes it: the client first lets
// the callers it carries finish, for at most goodbyeTimeout.
const closeAfterEndedWait = goodbyeTimeout + time.Second

// maxUnsaid bounds the lines kept for a session not opened yet.
const maxUnsaid = 8

func (a *Agent) serveDeveloper(raw *batchConn, conn *ssh.ServerConn, chans <-chan ssh.NewChannel, reqs <-chan *ssh.Request) {
	key, err := ssh.ParsePublicKey([]byte(conn.Permissions.Extensions[extKey]))
	if err != nil {
		conn.Close() // authenticated with a key the agent parsed a moment ago: cannot happen
		return
	}
	dc := &devConn{
		a:            a,
		key:          key,
		conn:         conn,
		raw:          raw,
		fingerprint:  conn.Permissions.Extensions[extFingerprint],
		user:         PeerText(conn.User()),
		gone:         make(chan struct{}),
		read:         make(chan struct{}),
		moveAnswered: make(chan struct{}),
		namesAsked:   make(chan struct{}),
		events:       make(chan Event, 32),
	}
	dc.stripes = stripeTableOf(conn, true)
	dc.stripes.take = func() error { return a.usage.take(dc.fingerprint, useChannel) }
	dc.stripes.give = func() { a.usage.give(dc.fingerprint, useChannel) }
	dc.lanes = newLaneSet(true)
	dc.lanes.take, dc.lanes.give = dc.stripes.take, dc.stripes.give
	go keepAlive(conn, a.KeepAlive, dc.gone, dc.stripes.sawRTT)
	go dc.tellEvents()
	requestsDone := make(chan struct{})
	go func() {
		defer close(requestsDone)
		dc.handleRequests(reqs)
	}()
	var readers sync.WaitGroup
	dc.handleChannels(chans, &readers)
	conn.Wait()
	close(dc.gone)
	// What the client sent before it closed, a goodbye above all, is read
	// before the run is detached.
	readers.Wait()
	<-requestsDone
	close(dc.read)
	dc.endLanes()
	if r := dc.currentRun(); r != nil {
		a.detach(dc, r)
	}
}

func (dc *devConn) handleRequests(reqs <-chan *ssh.Request) {
	for req := range reqs {
		switch req.Type {
		case "tcpip-forward", filteredForwardRequest, datagramForwardRequest:
			if dc.claimFor(req) {
				dc.forward(req)
			}
		case "cancel-tcpip-forward", cancelDatagramForward:
			if dc.claimFor(req) {
				dc.cancelForward(req)
			}
		case laneRequest:
			dc.becomeLane(req)
		default:
			if req.WantReply {
				req.Reply(req.Type == keepAliveRequest, nil)
			}
		}
	}
}

func (dc *devConn) handleChannels(chans <-chan ssh.NewChannel, readers *sync.WaitGroup) {
	for nc := range chans {
		if nc.ChannelType() == laneJoinType {
			dc.joinFlow(nc)
			continue
		}
		if !dc.claim(roleRun) {
			nc.Reject(ssh.Prohibited, "this connection is a lane: it carries the datagrams of its run's flows only")
			continue
		}
		switch nc.ChannelType() {
		case controlChannelType:
			dc.openControl(nc, readers)
		case datagramChannelType, datagramLanedType:
			go dc.datagrams(nc)
		case "direct-tcpip", stripeDirectType:
			go dc.direct(nc)
		case stripeJoinType:
			go dc.stripes.join(nc)
		case "session":
			go dc.session(nc)
		default:
			nc.Reject(ssh.UnknownChannelType, fmt.Sprintf("the plug agent does not open %s channels", nc.ChannelType()))
		}
	}
}

// openControl accepts the connection's control channel. A hello the open
// carries (helloAtOpen) is answered at once, before the channel's messages
// are read, and the names it asks for are served then.
func (dc *devConn) openControl(nc ssh.NewChannel, readers *sync.WaitGroup) {
	dc.mu.Lock()
	defer dc.mu.Unlock()
	if dc.control != nil {
		nc.Reject(ssh.Prohibited, "one control channel per connection")
		return
	}
	h, atOpen, err := helloAtOpen(nc.ExtraData())
	if err != nil {
		nc.Reject(ssh.Prohibited, err.Error())
		return
	}
	ch, reqs, err := acceptChannel(nc)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	dc.control = &controlConn{rw: ch}
	readers.Add(1)
	go func() {
		defer readers.Done()
		if atOpen && dc.openRun(h, true) {
			dc.serveAsked(h.Serves)
		}
		dc.readControl(dc.control)
	}()
}

// helloAtOpen reads the hello a control channel's open carries: a plug CLI
// that asks for its names with it saves the round trips of a hello and of
// forward requests after the open. Open data that is not one hello frame
// is an error; none is no hello.
func helloAtOpen(data []byte) (helloMsg, bool, error) {
	if len(data) == 0 {
		return helloMsg{}, false, nil
	}
	frame, err := readFrame(bytes.NewReader(data))
	if err == nil && 4+len(frame) != len(data) {
		err = errors.New("data after the frame")
	}
	if err != nil {
		return helloMsg{}, false, fmt.Errorf("the control channel's open carries no hello: %v", err)
	}
	if typ, err := decodeType(frame); err != nil || typ != typeHello {
		return helloMsg{}, false, fmt.Errorf("the control channel's open carries a %q message, not a hello", PeerText(typ))
	}
	h, err := decodeMsg[helloMsg](frame)
	if err != nil {
		return helloMsg{}, false, err
	}
	return h, true, nil
}

// serveAsked serves the names a hello at open asked for, one after the
// other, as forward requests of them would be, and says served or refused
// for each.
func (dc *devConn) serveAsked(asks []askedServe) {
	for _, a := range asks {
		var filter Filter
		if a.Filter != nil {
			filter = *a.Filter
		}
		served, err := dc.serve(a.Name, a.Port, a.UDP, filter)
		if err != nil {
			dc.tell(Event{Name: a.Name, Kind: EventRefused, Text: err.Error()})
			continue
		}
		dc.tellServed(a.Name, a.Port, a.UDP, served)
	}
}

// readControl handles the client's control messages until the channel ends.
// Garbage closes the connection.
func (dc *devConn) readControl(c *controlConn) {
	for {
		typ, frame, err := c.receive()
		if errors.Is(err, io.EOF) {
			return
		}
		if err == nil {
			err = dc.handleControl(typ, frame)
		}
		if err != nil {
			dc.logf("closing the connection of %s (%s) from %s: %v", dc.user, dc.fingerprint, dc.conn.RemoteAddr(), err)
			dc.conn.Close()
			return
		}
	}
}

func (dc *devConn) handleControl(typ string, frame []byte) error {
	switch typ {
	case typeHello:
		return handleMsg(frame, decodeMsg[helloMsg], func(h helloMsg) { dc.openRun(h, false) })
	case typeGoodbye:
		return handleMsg(frame, decodeMsg[goodbyeMsg], func(goodbyeMsg) { dc.goodbye() })
	case typeNames:
		dc.namesOnce.Do(func() { close(dc.namesAsked) })
	case typeStatus:
		dc.answer(nil, dc.answerStatus)
	case typeWho:
		dc.answer(whoMsg{Error: busyText}, dc.answerWho)
	case typeEnd:
		return handleMsg(frame, decodeMsg[endMsg], func(m endMsg) {
			dc.answer(endMsg{Error: busyText}, func() { dc.answerEnd(m) })
		})
	case typeMoved:
		return handleMsg(frame, decodeMsg[movedMsg], func(m movedMsg) {
			dc.mu.Lock()
			dc.movedTo = m.Agent
			dc.mu.Unlock()
			dc.moveOnce.Do(func() { close(dc.moveAnswered) })
		})
	case typeEnv:
		dc.answer(envDoneMsg{Error: busyText}, func() { dc.answerEnv(frame) })
	case typeMembers:
		return handleMsg(frame, decodeMsg[membersMsg], func(m membersMsg) {
			dc.answer(membersMsg{Error: busyText}, func() { dc.answerMembers(m) })
		})
	case typeVolume:
		go dc.answerVolume(frame)
	case typeAudit:
		return handleMsg(frame, decodeMsg[auditMsg], func(m auditMsg) {
			dc.answer(auditMsg{Error: busyText}, func() { dc.answerAudit(m) })
		})
	case typeAgentUpdate:
		return handleMsg(frame, decodeMsg[agentUpdateMsg], func(m agentUpdateMsg) {
			dc.answer(agentUpdateMsg{Done: true, Error: busyText}, func() { dc.answerAgentUpdate(m) })
		})
	}
	return nil // a type a newer client knows
}

// openRun answers a hello (atOpen: the one the control channel's open
// carried): it opens the connection's run or re-attaches it, and answers
// welcome. It reports whether the run is open. The CLI that sent a hello at
// open sends it again on the channel, for an agent that ignores the open's
// data: that copy is passed over.
func (dc *devConn) openRun(h helloMsg, atOpen bool) bool {
	dc.runMu.Lock()
	defer dc.runMu.Unlock()
	if dc.helloAtOpen && !atOpen && !dc.helloEchoed {
		dc.helloEchoed = true
		return false
	}
	dc.helloAtOpen = dc.helloAtOpen || atOpen
	if dc.run != nil {
		dc.tell(Event{Kind: EventWarning, Text: "hello ignored: this connection belongs to a run already"})
		return false
	}
	if why := dc.a.refusal(); why != "" {
		dc.logf("refused a run of %s (%s) from %s: %s", dc.user, dc.fingerprint, dc.conn.RemoteAddr(), why)
		go dc.tellEnded(ending{by: "agent", reason: why})
		go dc.closeAfterEnded()
		return false
	}
	r, resumed, err := dc.a.attach(dc, h)
	if err != nil {
		go dc.tellEnded(ending{by: "agent", reason: err.Error(), retry: errors.Is(err, errAgentStopping)})
		go dc.closeAfterEnded()
		return false
	}
	dc.run = r
	lanes := dc.lanes.agree(h.Lanes)
	if lanes > 0 {
		dc.laneToken = newRunID("")
		dc.a.lanes.Store(dc.laneToken, dc)
	}
	dc.sendControl(welcomeMsg{
		Version:        Version,
		Agent:          dc.a.ID,
		Platform:       dc.a.platformName(),
		Resumed:        resumed,
		Names:          true,
		Datagrams:      true,
		Filters:        true,
		Stripes:        dc.stripes.agree(h.Stripes),
		Lanes:          lanes,
		LaneToken:      dc.laneToken,
		UDPServe:       true,
		HelloAtOpen:    atOpen,
		NamesWhenAsked: h.NamesWhenAsked,
	})
	go dc.tellNames(h)
	return true
}

// goodbye ends the run at the client's request: its names are given back at
// once, then the goodbye is acknowledged.
func (dc *devConn) goodbye() {
	r := dc.currentRun()
	if r == nil || r.conn.Load() != dc {
		dc.sendControl(goodbyeMsg{})
		return
	}
	dc.a.endRun(r, ending{how: EndGoodbye, goodbye: true})
}

// currentRun is the connection's run, nil before it has one.
func (dc *devConn) currentRun() *run {
	dc.runMu.Lock()
	defer dc.runMu.Unlock()
	return dc.run
}

// ensureRun is the connection's run, opened for a client that said no hello
// (plain OpenSSH) on its first request; an error if the agent is shutting
// down or the key has as many runs as it may.
func (dc *devConn) ensureRun() (*run, error) {
	dc.runMu.Lock()
	defer dc.runMu.Unlock()
	if dc.run == nil {
		r, err := dc.a.newRun(helloMsg{Run: newRunID("ssh-")}, dc, true)
		if err != nil {
			return nil, err
		}
		dc.run = r
	}
	return dc.run, nil
}

// logf logs a line about this connection's key, within its share.
func (dc *devConn) logf(format string, args ...any) {
	dc.a.plog.printf(dc.fingerprint, format, args...)
}

// sendControl writes m on the control channel, if there is one.
func (dc *devConn) sendControl(m message) {
	if frame, err := encodeFrame(m); err == nil {
		dc.sendFrame(frame)
	}
}

// sendFrame writes a frame encodeFrame made on the control channel, if
// there is one.
func (dc *devConn) sendFrame(frame []byte) {
	dc.mu.Lock()
	c := dc.control
	dc.mu.Unlock()
	if c != nil {
		c.write(frame)
	}
}

// say passes m to the client on the control channel, or line to a plain
// OpenSSH client's session; lines said before a session opens are kept for
// it (a few), so that `ssh -R` without -N learns why a name was refused.
func (dc *devConn) say(m message, line string) {
	dc.mu.Lock()
	c, n := dc.control, dc.notices
	if c == nil && n == nil && len(dc.unsaid) < maxUnsaid {
		dc.unsaid = append(dc.unsaid, line)
	}
	dc.mu.Unlock()
	switch {
	case c != nil:
		c.send(m)
	case n != nil:
		n.line(line)
	}
}

// tell passes an event to the client.
func (dc *devConn) tell(e Event) {
	dc.say(eventMsg{Name: e.Name, Kind: string(e.Kind), Text: e.Text}, e.Text)
}

// tellServed says a name is served.
func (dc *devConn) tellServed(name string, port int, udp bool, s Served) {
	dc.say(servedMsg{Name: name, Port: port, UDP: udp, TookOver: s.TookOver, Detail: s.Detail}, servedLine(name, port, udp, s))
}

func servedLine(name string, port int, udp bool, s Served) string {
	line := fmt.Sprintf("%s:%s is served in the cluster", name, portText(port, udp))
	if s.TookOver {
		line += ", in place of the deployed service"
	}
	if s.Detail != "" {
		line += ": " + s.Detail
	}
	return line
}

// tellEnded says the agent ended the run.
func (dc *devConn) tellEnded(e ending) {
	dc.say(endedMsg{By: e.by, Reason: e.reason, Retry: e.retry}, fmt.Sprintf("ended by %s: %s", e.by, e.reason))
}

// closeAfterEnded gives a plug client told its run ended a moment to close
// the connection itself, so that the message is read; then closes it.
func (dc *devConn) closeAfterEnded() {
	dc.mu.Lock()
	wait := dc.control != nil
	dc.mu.Unlock()
	if wait {
		select {
		case <-dc.gone:
		case <-time.After(closeAfterEndedWait):
		}
	}
	dc.conn.Close()
}

// tellEvents tells the client the platform's events until the connection
// is gone.
func (dc *devConn) tellEvents() {
	for {
		select {
		case e := <-dc.events:
			dc.tell(e)
		case <-dc.gone:
			return
		}
	}
}
