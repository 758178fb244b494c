package tunnel

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// rawConn is a TCP connection whose reads and writes are system calls the
// Go runtime is not told of (syscall.RawSyscall), made through the
// connection's poller (syscall.RawConn), which waits for the socket to be
// ready when a call finds it is not. Go's sockets are non-blocking, so no
// such call blocks. Told of each call, as net.Conn's own are, the runtime
// wakes its monitor thread (sysmon) from its sleep at every one, and hands
// the processor of a call that takes longer than the monitor's 20 µs tick
// to another thread: on a stream, thread wake-ups per packet that cost
// more than the call. The SSH connection (newBatchConn) and the
// connections a stream joins it to (the agent's to the cluster, the CLI's
// to the developer's programs) are rawConns. Measured on the bench's
// Kubernetes (plug -c, 1 GiB each way, medians of 3): the agent's and the
// CLI's CPU per GiB together went from 2.8 to 2.6 s (laptop → pod) and
// from 2.8 to 2.4 s (pod → laptop); while requests and answers crossed
// one connection, the agent's threads made 13 futex and nanosleep calls in
// a second (perf trace), where they had made some 13,000.
type rawConn struct {
	*net.TCPConn
	rc syscall.RawConn
}

// rawIO is c as a rawConn when it is a TCP connection, else c.
func rawIO(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	return &rawConn{TCPConn: tc, rc: rc}
}

func (c *rawConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, errno, err := rawCall(c.rc.Read, func(fd uintptr) (int, syscall.Errno) {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		return int(r), e
	})
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, c.opError("read", os.NewSyscallError("read", errno))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// rawCall makes call, one raw system call on a socket, through wait, the
// socket's RawConn's Read or Write: again when it is interrupted (EINTR),
// and after wait has waited for the socket when it is not ready (EAGAIN).
// It returns the call's result and errno, or wait's error (a deadline, a
// closed socket).
func rawCall(wait func(func(fd uintptr) bool) error, call func(fd uintptr) (int, syscall.Errno)) (n int, errno syscall.Errno, err error) {
	err = wait(func(fd uintptr) bool {
		for {
			n, errno = call(fd)
			switch errno {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false
			}
			return true
		}
	})
	return n, errno, err
}

func (c *rawConn) Write(p []byte) (int, error) {
	var n int
	var errno syscall.Errno
	err := c.rc.Write(func(fd uintptr) bool {
		for n < len(p) {
			r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[n])), uintptr(len(p)-n))
			switch e {
			case 0:
				n += int(r)
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false
			default:
				errno = e
				return true
			}
		}
		return true
	})
	switch {
	case err != nil:
		return n, err
	case errno != 0:
		return n, c.opError("write", os.NewSyscallError("write", errno))
	}
	return n, nil
}

// opError is err as the net package returns it from op.
func (c *rawConn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
