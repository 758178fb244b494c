package tunnel

import (
	"errors"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// On Linux a UDP socket's datagrams are read in batches (frameReader):
// once one has arrived, the socket is read again without waiting until it
// has no more (EAGAIN) or the batch is full, all in one wake-up of the
// goroutine; and each read may return a coalesced run of datagrams
// (udpgso_linux.go).

// socketFrames is the frameReader of conn when it is a UDP socket; nil
// otherwise.
func socketFrames(conn net.Conn) frameReader {
	u, ok := conn.(*net.UDPConn)
	if !ok {
		return nil
	}
	raw, err := u.SyscallConn()
	if err != nil {
		return nil
	}
	takeCoalesced(u)
	return &socketFrameReader{raw: raw, buf: make([]byte, maxRead), oob: make([]byte, coalescedSpace)}
}

type socketFrameReader struct {
	raw syscall.RawConn
	buf []byte // one read's datagrams
	oob []byte // its control message
}

func (s *socketFrameReader) readFrames(dst []byte, limit int) ([]byte, error) {
	start := len(dst)
	var failed error
	err := s.raw.Read(func(fd uintptr) bool {
		for len(dst) == start || len(dst) < limit {
			n, oobn, _, _, err := unix.Recvmsg(int(fd), s.buf, s.oob, 0)
			switch {
			case errors.Is(err, unix.EAGAIN):
				return len(dst) > start // none yet: wait for one
			case errors.Is(err, unix.EINTR), errors.Is(err, unix.ECONNREFUSED):
				continue // an ICMP port unreachable loses a datagram, and ends nothing
			case err != nil:
				if len(dst) == start {
					failed = err
				}
				return true // a batch read so far goes; the error comes again next time
			}
			dst = appendRun(dst, s.buf[:n], coalescedSize(s.oob[:oobn]))
		}
		return true
	})
	if err == nil {
		err = failed
	}
	if err != nil {
		return dst[:start], err
	}
	return dst, nil
}
