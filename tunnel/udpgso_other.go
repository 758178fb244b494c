//go:build !linux

package tunnel

import "net"

// Elsewhere than on Linux each datagram is read and written on its own;
// see udpgso_linux.go.

const segmentOffload = false

func takeCoalesced(conn *net.UDPConn) {}

func coalescedSize(oob []byte) int { return 0 }

func appendSegmentSize(oob []byte, size int) []byte { return oob }

const coalescedSpace = 0
