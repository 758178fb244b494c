package tunnel

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// devConn is one authenticated developer connection: a plug CLI or a plain
// OpenSSH client.
type devConn struct {
	a           *Agent
	conn        *ssh.ServerConn
	fingerprint string
	gone        chan struct{} // closed once the connection is closed
	events      chan Event    // platform events, told by one goroutine

	runMu sync.Mutex // held while the run is chosen
	run   *run

	mu      sync.Mutex
	control *controlConn // plug's control channel, if the client opened one
	notices *notices     // a plain OpenSSH client's session, if it opened one
	unsaid  []string     // lines for a session not opened yet
}

// closeAfterEndedWait is how long a client told its run ended has to close
// the connection itself before the agent closes it.
const closeAfterEndedWait = 2 * time.Second

// maxUnsaid bounds the lines kept for a session not opened yet.
const maxUnsaid = 8

func (a *Agent) serveDeveloper(conn *ssh.ServerConn, chans <-chan ssh.NewChannel, reqs <-chan *ssh.Request) {
	dc := &devConn{
		a:           a,
		conn:        conn,
		fingerprint: conn.Permissions.Extensions[extFingerprint],
		gone:        make(chan struct{}),
		events:      make(chan Event, 32),
	}
	go keepAlive(conn, a.KeepAlive, dc.gone)
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
	if r := dc.currentRun(); r != nil {
		a.detach(dc, r)
	}
}

func (dc *devConn) handleRequests(reqs <-chan *ssh.Request) {
	for req := range reqs {
		switch req.Type {
		case "tcpip-forward":
			dc.forward(req)
		case "cancel-tcpip-forward":
			dc.cancelForward(req)
		default:
			if req.WantReply {
				req.Reply(req.Type == keepAliveRequest, nil)
			}
		}
	}
}

func (dc *devConn) handleChannels(chans <-chan ssh.NewChannel, readers *sync.WaitGroup) {
	for nc := range chans {
		switch nc.ChannelType() {
		case controlChannelType:
			dc.openControl(nc, readers)
		case "direct-tcpip":
			go dc.direct(nc)
		case "session":
			go dc.session(nc)
		default:
			nc.Reject(ssh.UnknownChannelType, fmt.Sprintf("the plug agent does not open %s channels", nc.ChannelType()))
		}
	}
}

func (dc *devConn) openControl(nc ssh.NewChannel, readers *sync.WaitGroup) {
	dc.mu.Lock()
	defer dc.mu.Unlock()
	if dc.control != nil {
		nc.Reject(ssh.Prohibited, "one control channel per connection")
		return
	}
	ch, reqs, err := nc.Accept()
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	dc.control = &controlConn{rw: ch}
	readers.Add(1)
	go func() {
		defer readers.Done()
		dc.readControl(dc.control)
	}()
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
			dc.a.logf("closing the connection from %s: %v", dc.conn.RemoteAddr(), err)
			dc.conn.Close()
			return
		}
	}
}

func (dc *devConn) handleControl(typ string, frame []byte) error {
	switch typ {
	case typeHello:
		h, err := decodeHello(frame)
		if err != nil {
			return err
		}
		dc.hello(h)
	case typeGoodbye:
		if _, err := decodeGoodbye(frame); err != nil {
			return err
		}
		dc.goodbye()
	case typeStatus:
		go dc.answerStatus()
	}
	return nil // a type a newer client knows
}

// hello opens the connection's run or re-attaches it, and answers welcome.
func (dc *devConn) hello(h helloMsg) {
	dc.runMu.Lock()
	defer dc.runMu.Unlock()
	if dc.run != nil {
		dc.tell(Event{Kind: EventWarning, Text: "hello ignored: this connection belongs to run " + dc.run.id + " already"})
		return
	}
	if why := dc.a.refusal(); why != "" {
		dc.a.logf("refused a run of %s (%s) from %s: %s", dc.conn.User(), dc.fingerprint, dc.conn.RemoteAddr(), why)
		go dc.tellEnded(ending{by: "agent", reason: why})
		go dc.closeAfterEnded()
		return
	}
	r, resumed, err := dc.a.attach(dc, h)
	if err != nil {
		go dc.tellEnded(ending{by: "agent", reason: err.Error(), retry: errors.Is(err, errAgentStopping)})
		go dc.closeAfterEnded()
		return
	}
	dc.run = r
	dc.a.logf("run %s: plug %s on %s/%s, %s", r.id, h.Version, h.OS, h.Arch, h.Kind)
	dc.sendControl(welcomeMsg{
		Version:  Version,
		Agent:    dc.a.ID,
		Platform: dc.a.platformName(),
		Resumed:  resumed,
		Names:    true,
	})
	go dc.tellNames()
}

// goodbye ends the run at the client's request: its names are given back at
// once, then the goodbye is acknowledged.
func (dc *devConn) goodbye() {
	r := dc.currentRun()
	if r == nil || r.conn.Load() != dc {
		dc.sendControl(goodbyeMsg{})
		return
	}
	dc.a.endRun(r, ending{reason: "said goodbye", goodbye: true})
}

// currentRun is the connection's run, nil before it has one.
func (dc *devConn) currentRun() *run {
	dc.runMu.Lock()
	defer dc.runMu.Unlock()
	return dc.run
}

// ensureRun is the connection's run, opened for a client that said no hello
// (plain OpenSSH) on its first request; nil if the agent is shutting down.
func (dc *devConn) ensureRun() *run {
	dc.runMu.Lock()
	defer dc.runMu.Unlock()
	if dc.run == nil {
		dc.run = dc.a.newRun(newRunID("ssh-"), dc, true)
	}
	return dc.run
}

// sendControl writes m on the control channel, if there is one.
func (dc *devConn) sendControl(m message) {
	dc.mu.Lock()
	c := dc.control
	dc.mu.Unlock()
	if c != nil {
		c.send(m)
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
func (dc *devConn) tellServed(name string, port int, s Served) {
	dc.say(servedMsg{Name: name, Port: port, TookOver: s.TookOver, Detail: s.Detail}, servedLine(name, port, s))
}

func servedLine(name string, port int, s Served) string {
	line := fmt.Sprintf("%s:%d is served in the cluster", name, port)
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
