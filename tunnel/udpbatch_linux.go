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
	s := &socketFrameReader{calls: newDatagramCalls(u), buf: make([]byte, maxRead), oob: make([]byte, coalescedSpace)}
	s.try = s.fill
	return s
}

type socketFrameReader struct {
	calls *datagramCalls // raw, without the sender's address (udpraw_linux.go)
	buf   []byte         // one read's datagrams
	oob   []byte         // its control message

	// The batch being read, and the function the poller calls to read
	// it, made once: a batch allocates nothing.
	dst          []byte
	start, limit int
	failed       error
	try          func(fd uintptr) bool
}

func (s *socketFrameReader) readFrames(dst []byte, limit int) ([]byte, error) {
	s.dst, s.start, s.limit, s.failed = dst, len(dst), limit, nil
	err := s.calls.rc.Read(s.try)
	dst, s.dst = s.dst, nil
	if err == nil {
		err = s.failed
	}
	if err != nil {
		return dst[:s.start], err
	}
	return dst, nil
}

// fill reads the socket's waiting datagrams into s.dst as frames, while
// it is shorter than s.limit; false when none has arrived yet.
func (s *socketFrameReader) fill(fd uintptr) bool {
	for len(s.dst) == s.start || len(s.dst) < s.limit {
		n, oobn, errno := s.calls.recvRaw(fd, s.buf, s.oob)
		switch errno {
		case 0:
			s.dst = appendRun(s.dst, s.buf[:n], coalescedSize(s.oob[:oobn]))
		case unix.EAGAIN:
			return len(s.dst) > s.start // none yet: wait for one
		case unix.EINTR, unix.ECONNREFUSED:
			// an ICMP port unreachable loses a datagram, and ends nothing
		default:
			if len(s.dst) == s.start {
				s.failed = os.NewSyscallError("recvmsg", errno)
			}
			return true // a batch read so far goes; the error comes again next time
		}
	}
	return true
}
