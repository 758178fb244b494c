package tunnel

import (
	"time"

	"golang.org/x/crypto/ssh"
)

const (
	keepAliveRequest = "keepalive@openssh.com"
	// defaultKeepAlive is how often each side asks whether the other is
	// still there; keepAliveMisses unanswered requests in a row mean it is
	// not, and the connection is closed: a dead peer is noticed within
	// about 15 s.
	defaultKeepAlive = 5 * time.Second
	keepAliveMisses  = 3
)

// keepAlive sends a keepalive@openssh.com request at once and then every
// interval until done is closed, and closes conn once keepAliveMisses
// requests in a row went unanswered. Any reply, success or failure, is an
// answer: OpenSSH answers requests it does not know with a failure. Each
// answer's round trip goes to rtt.
func keepAlive(conn ssh.Conn, interval time.Duration, done <-chan struct{}, rtt func(time.Duration)) {
	answered := make(chan struct{}, 1)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	ask := func() {
		start := time.Now()
		if _, _, err := conn.SendRequest(keepAliveRequest, true, nil); err == nil {
			rtt(time.Since(start))
			answered <- struct{}{}
		}
	}
	pending, missed := true, 0
	go ask()
	for {
		select {
		case <-done:
			return
		case <-answered:
			pending, missed = false, 0
		case <-ticker.C:
			if pending {
				missed++
				if missed >= keepAliveMisses {
					conn.Close()
					return
				}
				continue
			}
			pending = true
			go ask()
		}
	}
}

// answerRequests answers the global requests nobody else handles: yes to a
// keepalive, no to anything else.
func answerRequests(reqs <-chan *ssh.Request) {
	for req := range reqs {
		if req.WantReply {
			req.Reply(req.Type == keepAliveRequest, nil)
		}
	}
}
