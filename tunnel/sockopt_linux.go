package tunnel

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// setSockopt sets the integer option name at level of c's socket to value.
// Its callers ask for what makes plug faster, not what makes it work: a
// system that refuses leaves plug working as before.
func setSockopt(c syscall.Conn, level, name, value int) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), level, name, value) }); err != nil {
		return err
	}
	return serr
}
