//go:build linux

package smb

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// arrivalReader reads a client's connection and notes when the bytes of
// its latest read arrived: the kernel's receive time of the last segment
// the read took (SO_TIMESTAMPNS, which TCP gives with each recvmsg), or,
// where the kernel gives none, the time of the read.
//
// The server reads a connection only for the message it is assembling,
// so once a message is whole its last byte came with the latest read:
// that read's arrival is when the whole message had arrived (later, by
// as little as the network allows, when the same read took bytes of the
// next message too). Unlike the time the server gets to read it, it does
// not depend on when the Go scheduler runs the connection's goroutine,
// so it orders the messages of different connections as they came.
type arrivalReader struct {
	nc  net.Conn
	rc  syscall.RawConn // nil: no receive timestamps
	oob []byte
	// last is the arrival of the latest read's bytes, in Unix
	// nanoseconds (the kernel's CLOCK_REALTIME, as time.Now).
	last int64
}

// newArrivalReader reads nc, asking the kernel for receive timestamps
// when nc is a socket that gives them.
func newArrivalReader(nc net.Conn) *arrivalReader {
	a := &arrivalReader{nc: nc}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return a
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return a
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err != nil || serr != nil {
		return a
	}
	a.rc, a.oob = rc, make([]byte, unix.CmsgSpace(16))
	return a
}

// Read reads as net.Conn's Read does, and notes the arrival of what it
// read.
func (a *arrivalReader) Read(p []byte) (int, error) {
	if a.rc == nil {
		n, err := a.nc.Read(p)
		a.last = time.Now().UnixNano()
		return n, err
	}
	var n, oobn int
	var serr error
	err := a.rc.Read(func(fd uintptr) bool {
		for {
			n, oobn, _, _, serr = unix.Recvmsg(int(fd), p, a.oob, 0)
			if serr != unix.EINTR {
				return serr != unix.EAGAIN
			}
		}
	})
	switch {
	case err != nil:
		return 0, err
	case serr != nil:
		return 0, os.NewSyscallError("recvmsg", serr)
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	a.last = kernelStamp(a.oob[:oobn])
	if a.last == 0 {
		a.last = time.Now().UnixNano()
	}
	return n, nil
}

// kernelStamp is the SO_TIMESTAMPNS receive time in the control messages
// b, in Unix nanoseconds, or 0 when there is none (the segments came
// before the socket asked for them).
func kernelStamp(b []byte) int64 {
	msgs, err := unix.ParseSocketControlMessage(b)
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SO_TIMESTAMPNS {
			continue
		}
		// A struct timespec: two longs.
		switch ne := binary.NativeEndian; len(m.Data) {
		case 16:
			return int64(ne.Uint64(m.Data))*1e9 + int64(ne.Uint64(m.Data[8:]))
		case 8:
			return int64(int32(ne.Uint32(m.Data)))*1e9 + int64(ne.Uint32(m.Data[4:]))
		}
	}
	return 0
}
