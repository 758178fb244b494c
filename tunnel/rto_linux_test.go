package tunnel

import (
	"errors"
	"net"
	"testing"

	"golang.org/x/sys/unix"

	"plug/tunnel/clustertest"
)

// TestAnSSHConnectionRetransmitsSooner: the TCP connection an SSH
// connection runs on (newBatchConn, both ends) waits retransmitMin, not
// Linux's 200 ms, before it sends an unacknowledged segment again.
func TestAnSSHConnectionRetransmitsSooner(t *testing.T) {
	client, _ := clustertest.TCPPair(t)
	b := newBatchConn(client)
	defer b.Close()
	raw, err := client.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got int
	var gerr error
	raw.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_RTO_MIN_US) })
	if errors.Is(gerr, unix.ENOPROTOOPT) {
		clustertest.Unavailable(t, "this kernel has no TCP_RTO_MIN_US (Linux 6.15 and later)")
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
	// The kernel keeps it in jiffies: within one of 4 ms (HZ=250) or more.
	if want := int(retransmitMin.Microseconds()); got < want || got > want+10000 {
		t.Fatalf("TCP_RTO_MIN_US is %d µs, want %d", got, want)
	}
}
