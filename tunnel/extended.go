package tunnel

import "golang.org/x/crypto/ssh"

// A peer may send extended data (stderr) on any channel, and x/crypto/ssh
// keeps what it is sent until it is read, up to the channel's window of
// 2 MiB. Plug reads no peer's stderr: the agent drops it as it arrives on
// every channel a peer can write to, so that a channel never holds more
// than what its reader has not yet taken.

// acceptChannel accepts nc, dropping the extended data it is sent.
func acceptChannel(nc ssh.NewChannel) (ssh.Channel, <-chan *ssh.Request, error) {
	ch, reqs, err := nc.Accept()
	if err == nil {
		go dropExtended(ch)
	}
	return ch, reqs, err
}

// openChannel opens a channel on conn, dropping the extended data it is
// sent.
func openChannel(conn ssh.Conn, kind string, payload []byte) (ssh.Channel, <-chan *ssh.Request, error) {
	ch, reqs, err := conn.OpenChannel(kind, payload)
	if err == nil {
		go dropExtended(ch)
	}
	return ch, reqs, err
}

// dropExtended reads ch's extended data until ch closes, into a small
// buffer, and drops it.
func dropExtended(ch ssh.Channel) {
	buf := make([]byte, 512)
	r := ch.Stderr()
	for {
		if _, err := r.Read(buf); err != nil {
			return
		}
	}
}
