//go:build !linux

package tunnel

import "net"

// keepUnsentShort does nothing elsewhere than on Linux; see
// lanesock_linux.go.
func keepUnsentShort(c net.Conn) {}
