//go:build !linux

package tunnel

import "net"

// keepUnsentShort does nothing elsewhere than on Linux; see
// lanesock_linux.go.
func keepUnsentShort(c net.Conn) {}

// laneRepairs is nil elsewhere than on Linux: a lane's pump never sits
// out; see lanesock_linux.go.
func laneRepairs(c net.Conn) func() bool { return nil }
