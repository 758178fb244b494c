package tunnel

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
)

// session answers a plain OpenSSH client's session channel, so that
// `ssh -R NAME:PORT:localhost:LOCAL agent` works without -N: a shell or a
// command prints what the run serves and stays open until the client ends
// it. With a terminal, Ctrl-C or Ctrl-D ends the run at once, as a goodbye.
// X11, agent forwarding, environment variables and subsystems are refused.
func (dc *devConn) session(nc ssh.NewChannel) {
	if err := dc.a.usage.take(dc.fingerprint, useChannel); err != nil {
		nc.Reject(ssh.ResourceShortage, err.Error())
		return
	}
	defer dc.a.usage.give(dc.fingerprint, useChannel)
	ch, reqs, err := nc.Accept()
	if err != nil {
		return
	}
	defer ch.Close()
	pty, started := false, false
	for req := range reqs {
		ok := false
		switch req.Type {
		case "pty-req":
			pty, ok = true, true
		case "window-change":
			ok = true
		case "shell", "exec":
			ok = !started
			if ok {
				started = true
				go dc.statusSession(ch, pty)
			}
		}
		if req.WantReply {
			req.Reply(ok, nil)
		}
	}
}

// statusSession prints the run's status in the session, then passes the
// run's events to it until the client ends it.
func (dc *devConn) statusSession(ch ssh.Channel, pty bool) {
	r, err := dc.ensureRun()
	if err != nil {
		fmt.Fprintln(ch.Stderr(), "plug agent: "+err.Error())
		ch.Close()
		return
	}
	n := &notices{w: ch.Stderr(), eol: "\n"}
	if pty {
		n.eol = "\r\n"
	}
	n.line(fmt.Sprintf("plug agent %s (%s) on %s: run %s of %s (%s) serves %s; press Ctrl-C to end",
		dc.a.ID, Version, dc.a.platformName(), r.id, r.user, r.developer, r.names()))
	dc.mu.Lock()
	if dc.notices == nil {
		dc.notices = n
		for _, line := range dc.unsaid {
			n.line(line)
		}
		dc.unsaid = nil
	}
	dc.mu.Unlock()
	if !pty {
		io.Copy(io.Discard, ch) // the session lasts until the client closes it
		return
	}
	buf := make([]byte, 256)
	for {
		k, err := ch.Read(buf)
		if bytes.ContainsAny(buf[:k], "\x03\x04") {
			n.line("ending: giving back " + r.names())
			dc.goodbye()
			ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{0}))
			ch.Close()
			return
		}
		if err != nil {
			return
		}
	}
}

// notices writes lines of text to a plain OpenSSH client's terminal.
type notices struct {
	mu  sync.Mutex
	w   io.Writer
	eol string
}

func (n *notices) line(text string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	io.WriteString(n.w, "plug: "+strings.ReplaceAll(printableLines(text), "\n", n.eol)+n.eol)
}
