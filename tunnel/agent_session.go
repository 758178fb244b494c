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
//
// What the client types is read as it arrives, from the channel's opening
// on, and dropped but for those two keys (readSession): x/crypto/ssh keeps
// what a channel is sent and not read, up to its window of 2 MiB. A key
// may have maxSessionsPerKey sessions open; each is also one of its
// channels.
func (dc *devConn) session(nc ssh.NewChannel) {
	for _, kind := range []usageKind{useSession, useChannel} {
		if err := dc.a.usage.take(dc.fingerprint, kind); err != nil {
			dc.logf("refused a session channel of %s (%s): %v", dc.user, dc.fingerprint, err)
			nc.Reject(ssh.ResourceShortage, err.Error())
			return // what was taken is given back by the deferred calls
		}
		defer dc.a.usage.give(dc.fingerprint, kind)
	}
	ch, reqs, err := acceptChannel(nc)
	if err != nil {
		return
	}
	defer ch.Close()
	interrupt := make(chan func(), 1) // what Ctrl-C does, once shell or exec started the session
	go readSession(ch, interrupt)
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
				go dc.statusSession(ch, pty, interrupt)
			}
		}
		if req.WantReply {
			req.Reply(ok, nil)
		}
	}
}

// readSession reads what the client of a session sends until the channel
// ends, and drops it; once a func arrives on interrupt, Ctrl-C or Ctrl-D
// calls it and ends the reading.
func readSession(ch ssh.Channel, interrupt <-chan func()) {
	var onCtrlC func()
	buf := make([]byte, sparseBuffer)
	for {
		k, err := ch.Read(buf)
		if onCtrlC == nil {
			select {
			case onCtrlC = <-interrupt:
			default:
			}
		}
		if onCtrlC != nil && bytes.ContainsAny(buf[:k], "\x03\x04") {
			onCtrlC()
			return
		}
		if err != nil {
			return
		}
	}
}

// statusSession prints the run's status in the session, and makes it where
// the run's events are told (notices) until the client ends it. With a
// terminal, it hands readSession, on interrupt, the goodbye Ctrl-C says.
func (dc *devConn) statusSession(ch ssh.Channel, pty bool, interrupt chan<- func()) {
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
	if pty {
		interrupt <- func() {
			n.line("ending: giving back " + r.names())
			dc.goodbye()
			ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{0}))
			ch.Close()
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
