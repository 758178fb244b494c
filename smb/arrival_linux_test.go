//go:build linux

package smb

import (
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"plug/tunnel/clustertest"
)

// TestArrivalIsKernelTime: what a connection reads is stamped with when
// it reached the socket, not when it was read: a byte that waited in the
// socket's queue has a stamp from before the wait ended.
func TestArrivalIsKernelTime(t *testing.T) {
	client, server := clustertest.TCPPair(t)
	a := newArrivalReader(server)
	if a.rc == nil {
		t.Fatal("a TCP socket gives no receive timestamps")
	}
	rc, _ := server.(syscall.Conn).SyscallConn()
	queued := func() error {
		var n int
		var qerr error
		rc.Control(func(fd uintptr) { n, qerr = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
		if qerr != nil {
			return qerr
		}
		if n == 0 {
			return errors.New("nothing queued")
		}
		return nil
	}
	// The kernel stamps what comes once it has turned timestamps on, a
	// moment after the socket asks for them: what came before is stamped
	// with the time it was read.
	buf := make([]byte, 16)
	clustertest.Eventually(t, 10*time.Second, "a byte stamped with its arrival", func() error {
		sent := time.Now().UnixNano()
		if _, err := client.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		clustertest.Eventually(t, 10*time.Second, "the byte queued at the server's socket", queued)
		seen := time.Now().UnixNano()
		if n, err := a.Read(buf); n != 1 || err != nil {
			t.Fatalf("read %d bytes, %v", n, err)
		}
		if a.last < sent {
			t.Fatalf("the byte's arrival is %d ns before it was sent", sent-a.last)
		}
		if a.last >= seen {
			return fmt.Errorf("the byte's arrival is %d ns after it was seen queued", a.last-seen)
		}
		return nil
	})
	client.Close()
	if n, err := a.Read(buf); n != 0 || err != io.EOF {
		t.Errorf("after the client closed: %d bytes, %v; want io.EOF", n, err)
	}
}
