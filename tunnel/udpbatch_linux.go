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
// goroutine.

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
	return socketFrameReader{raw}
}

type socketFrameReader struct{ raw syscall.RawConn }

func (s socketFrameReader) readFrames(dst []byte, limit int) ([]byte, error) {
	start := len(dst)
	var failed error
	err := s.raw.Read(func(fd uintptr) bool {
		for len(dst) == start || len(dst) < limit {
			at := len(dst)
			n, err := unix.Read(int(fd), dst[at+2:at+2+MaxDatagram])
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
			dst = putFrameHeader(dst, at, n)
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
