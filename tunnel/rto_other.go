//go:build !linux

package tunnel

import "net"

// shortenRetransmitWait does nothing where the system cannot set it; see
// rto_linux.go.
func shortenRetransmitWait(c net.Conn) {}
