package tunnel

import (
	"net"
	"os"

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
	takeCoalesced(u)
	return &socketFrameReader{calls: newDatagramCalls(u), buf: make([]byte, maxRead), oob: make([]byte, coalescedSpace)}
}

type socketFrameReader struct {
	calls *datagramCalls // raw, without the sender's address (udpraw_linux.go)
	buf   []byte         // one read's datagrams
	oob   []byte         // its control message
}

func (s *socketFrameReader) readFrames(dst []byte, limit int) ([]byte, error) {
	start := len(dst)
	var failed error
	err := s.calls.rc.Read(func(fd uintptr) bool {
		for len(dst) == start || len(dst) < limit {
			n, oobn, errno := s.calls.recvRaw(fd, s.buf, s.oob)
			switch errno {
			case 0:
				dst = appendRun(dst, s.buf[:n], coalescedSize(s.oob[:oobn]))
			case unix.EAGAIN:
				return len(dst) > start // none yet: wait for one
			case unix.EINTR, unix.ECONNREFUSED:
				// an ICMP port unreachable loses a datagram, and ends nothing
			default:
				if len(dst) == start {
					failed = os.NewSyscallError("recvmsg", errno)
				}
				return true // a batch read so far goes; the error comes again next time
			}
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
