//go:build !linux

package tunnel

import "net"

// Elsewhere than on Linux a UDP socket is read one datagram at a time;
// see udpbatch_linux.go.
func socketFrames(conn net.Conn) frameReader { return nil }
