//go:build !linux

package tunnel

import "net"

// Elsewhere than on Linux (the developer's machine, whose UDP ports are
// bound to one loopback address each) replies go from the address the
// kernel picks; see udpflows_linux.go.

func reportDestinations(pc *net.UDPConn) {}

func replyControl(oob []byte) []byte { return nil }

const controlSpace = 0
