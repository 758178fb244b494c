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
//
// A call allocates nothing: the function the poller calls is made once per
// connection (rawOp), not a closure per call.
type rawConn struct {
	*net.TCPConn
	rc          syscall.RawConn
	read, write rawOp
}

// rawOp is a read or a write of a rawConn in progress: its bytes, what it
// did, and the function the poller calls to do it.
type rawOp struct {
	p     []byte
	n     int
	errno syscall.Errno
	try   func(fd uintptr) bool // made once: reports false when the socket is not ready
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
	r := &rawConn{TCPConn: tc, rc: rc}
	r.read.try, r.write.try = r.readOnce, r.writeAll
	return r
}

func (c *rawConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.read.p, c.read.n, c.read.errno = p, 0, 0
	err := c.rc.Read(c.read.try)
	n, errno := c.read.n, c.read.errno
	c.read.p = nil
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

// readOnce reads into c.read.p once.
func (c *rawConn) readOnce(fd uintptr) bool {
	p := c.read.p
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // the poller waits for the socket, then calls again
		}
		c.read.n, c.read.errno = int(r), e
		return true
	}
}

func (c *rawConn) Write(p []byte) (int, error) {
	c.write.p, c.write.n, c.write.errno = p, 0, 0
	err := c.rc.Write(c.write.try)
	n, errno := c.write.n, c.write.errno
	c.write.p = nil
	switch {
	case err != nil:
		return n, err
	case errno != 0:
		return n, c.opError("write", os.NewSyscallError("write", errno))
	}
	return n, nil
}

// writeAll writes c.write.p, what of it is left, until it is all written,
// the socket is not ready or a write fails.
func (c *rawConn) writeAll(fd uintptr) bool {
	p := c.write.p
	for c.write.n < len(p) {
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[c.write.n])), uintptr(len(p)-c.write.n))
		switch e {
		case 0:
			c.write.n += int(r)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			c.write.errno = e
			return true
		}
	}
	return true
}

// opError is err as the net package returns it from op.
func (c *rawConn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
