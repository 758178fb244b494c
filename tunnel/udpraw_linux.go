package tunnel

import (
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// On Linux plug's UDP sockets are read and written with recvmsg and
// sendmsg made as raw system calls through the socket's poller, as a
// stream's TCP connections are (rawio_linux.go says why), and a run of
// datagrams leaves from where its frames lie (an I/O vector), not from a
// copy. A connected socket is read without asking the sender's address:
// x/sys/unix's Recvmsg, asked for it, makes a getsockopt call of its own
// at every read to learn the socket's protocol.

// datagramCalls makes the recvmsg and sendmsg calls of one UDP socket for
// one goroutine: its message header and I/O vector are reused from call to
// call.
type datagramCalls struct {
	rc    syscall.RawConn
	inet6 bool // the socket's addresses are sockaddr_in6
	msg   unix.Msghdr
	iov   []unix.Iovec
	name  unix.RawSockaddrInet6 // room for either family's address

	// The call in progress, and the function the poller calls to make
	// it, made once (a call allocates nothing).
	nr    uintptr
	n     int
	errno syscall.Errno
	try   func(fd uintptr) bool
}

// newDatagramCalls returns the calls of c.
func newDatagramCalls(c *net.UDPConn) *datagramCalls {
	rc, _ := c.SyscallConn() // fails only for a nil *UDPConn
	d := &datagramCalls{rc: rc}
	d.try = d.once
	rc.Control(func(fd uintptr) {
		domain, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DOMAIN)
		d.inet6 = err == nil && domain == unix.AF_INET6
	})
	return d
}

// recv reads one datagram (or coalesced run) into b, its control
// messages into oob, and its sender's address.
func (d *datagramCalls) recv(b, oob []byte) (n, oobn int, from netip.AddrPort, err error) {
	d.setRecv(b, oob, true)
	n, err = d.call("recvmsg", unix.SYS_RECVMSG)
	if err != nil {
		return 0, 0, netip.AddrPort{}, err
	}
	return n, int(d.msg.Controllen), d.sender(), nil
}

// recvRaw is one recvmsg of fd, d's socket, without the sender's address,
// for a caller inside the poller's Read: it does not wait.
func (d *datagramCalls) recvRaw(fd uintptr, b, oob []byte) (n, oobn int, errno syscall.Errno) {
	d.setRecv(b, oob, false)
	n, errno = d.raw(unix.SYS_RECVMSG, fd)
	return n, int(d.msg.Controllen), errno
}

// setRecv makes d.msg the header of a recvmsg into b and oob, with room
// for the sender's address when named.
func (d *datagramCalls) setRecv(b, oob []byte, named bool) {
	d.msg = unix.Msghdr{}
	d.iov = append(d.iov[:0], unix.Iovec{Base: unsafe.SliceData(b)})
	d.iov[0].SetLen(len(b))
	d.msg.Iov, d.msg.Iovlen = &d.iov[0], 1
	if len(oob) > 0 {
		d.msg.Control = &oob[0]
		d.msg.SetControllen(len(oob))
	}
	if named {
		d.msg.Name = (*byte)(unsafe.Pointer(&d.name))
		d.msg.Namelen = uint32(unsafe.Sizeof(d.name))
	}
}

// send writes the datagram whose bytes are parts, in order (a run, when oob
// gives its segment size), to to, or to the socket's peer when to is not
// valid.
func (d *datagramCalls) send(parts [][]byte, oob []byte, to netip.AddrPort) error {
	d.msg = unix.Msghdr{}
	d.iov = d.iov[:0]
	for _, p := range parts {
		v := unix.Iovec{Base: unsafe.SliceData(p)}
		v.SetLen(len(p))
		d.iov = append(d.iov, v)
	}
	if len(d.iov) > 0 {
		d.msg.Iov = &d.iov[0]
		d.msg.SetIovlen(len(d.iov))
	}
	if len(oob) > 0 {
		d.msg.Control = &oob[0]
		d.msg.SetControllen(len(oob))
	}
	if to.IsValid() {
		if err := d.name4or6(to); err != nil {
			return err
		}
	}
	_, err := d.call("sendmsg", unix.SYS_SENDMSG)
	return err
}

// call makes the system call nr, recvmsg or sendmsg, of d.msg through
// the socket's poller, which waits while the socket is not ready.
func (d *datagramCalls) call(op string, nr uintptr) (int, error) {
	d.nr, d.n, d.errno = nr, 0, 0
	var err error
	if nr == unix.SYS_SENDMSG {
		err = d.rc.Write(d.try)
	} else {
		err = d.rc.Read(d.try)
	}
	switch {
	case err != nil:
		return 0, err
	case d.errno != 0:
		return 0, os.NewSyscallError(op, d.errno)
	}
	return d.n, nil
}

// once makes d's call once, again if it is interrupted; false when the
// socket is not ready.
func (d *datagramCalls) once(fd uintptr) bool {
	for {
		r, e := d.raw(d.nr, fd)
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		d.n, d.errno = r, e
		return true
	}
}

// raw makes the system call nr of d.msg on fd.
func (d *datagramCalls) raw(nr, fd uintptr) (int, syscall.Errno) {
	r, _, e := syscall.RawSyscall(nr, fd, uintptr(unsafe.Pointer(&d.msg)), 0)
	return int(r), e
}

// sender is the address a named recv filled in.
func (d *datagramCalls) sender() netip.AddrPort {
	switch d.name.Family {
	case unix.AF_INET:
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&d.name))
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), ntohs(sa.Port))
	case unix.AF_INET6:
		a := netip.AddrFrom16(d.name.Addr)
		if d.name.Scope_id != 0 {
			a = a.WithZone(strconv.FormatUint(uint64(d.name.Scope_id), 10))
		}
		return netip.AddrPortFrom(a, ntohs(d.name.Port))
	}
	return netip.AddrPort{}
}

// name4or6 makes to the message's destination, in the socket's family.
func (d *datagramCalls) name4or6(to netip.AddrPort) error {
	d.name = unix.RawSockaddrInet6{}
	if !d.inet6 {
		if !to.Addr().Unmap().Is4() {
			return &net.AddrError{Err: "not an IPv4 address", Addr: to.Addr().String()}
		}
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&d.name))
		sa.Family, sa.Port, sa.Addr = unix.AF_INET, htons(to.Port()), to.Addr().Unmap().As4()
		d.msg.Name, d.msg.Namelen = (*byte)(unsafe.Pointer(sa)), unix.SizeofSockaddrInet4
		return nil
	}
	d.name.Family, d.name.Port, d.name.Addr = unix.AF_INET6, htons(to.Port()), to.Addr().As16()
	if zone := to.Addr().Zone(); zone != "" {
		id, err := strconv.ParseUint(zone, 10, 32)
		if err != nil {
			ifi, ierr := net.InterfaceByName(zone)
			if ierr != nil {
				return ierr
			}
			id = uint64(ifi.Index)
		}
		d.name.Scope_id = uint32(id)
	}
	d.msg.Name, d.msg.Namelen = (*byte)(unsafe.Pointer(&d.name)), unix.SizeofSockaddrInet6
	return nil
}

// htons and ntohs turn a port to and from network byte order, as a
// sockaddr's port field holds it.
func htons(p uint16) (n uint16) {
	binary.BigEndian.PutUint16(unsafe.Slice((*byte)(unsafe.Pointer(&n)), 2), p)
	return n
}

func ntohs(n uint16) uint16 {
	return binary.BigEndian.Uint16(unsafe.Slice((*byte)(unsafe.Pointer(&n)), 2))
}

// datagramSender is how the frame writers of c send to to (the socket's
// peer when to is not valid): with raw calls, each run from where its
// datagrams lie.
func datagramSender(c *net.UDPConn, to netip.AddrPort) func(run [][]byte, oob []byte) error {
	d := newDatagramCalls(c)
	return func(run [][]byte, oob []byte) error { return d.send(run, oob, to) }
}

// datagramReceiver is how DatagramFlows reads c: raw calls that name each
// datagram's sender.
func datagramReceiver(c *net.UDPConn) func(b, oob []byte) (n, oobn int, from netip.AddrPort, err error) {
	d := newDatagramCalls(c)
	return d.recv
}
