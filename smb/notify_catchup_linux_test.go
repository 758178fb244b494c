//go:build linux

package smb

import (
	"encoding/binary"
	"net"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"plug/smb/internal/wire"
	"plug/tunnel/clustertest"
)

// TestNotifyCatchUp: a directory's first CHANGE_NOTIFY is told of a
// change another connection asked for after the request arrived, though
// the server made the change before it got to the request (its
// connection busy meanwhile); a change made, and answered, before the
// request was sent is not told.
func TestNotifyCatchUp(t *testing.T) {
	s := rawServer(t)
	watcher, other := dialRaw(t, s), dialRaw(t, s)
	dir := watcher.create("watched", fileOpenIf, optDirectory)
	other.create(`watched\before.txt`, fileCreate, optNonDirectory)

	// A connection is not read while its reads and writes are all under
	// way: with them held, the watcher's connection takes a READ and
	// waits, the CHANGE_NOTIFY behind it in the socket.
	for range maxIO {
		watcher.c.ioSlots <- struct{}{}
	}
	le := binary.LittleEndian
	read := le.AppendUint16(nil, 49)
	read = append(read, make([]byte, 47)...) // no such file: FileId 0
	readID := watcher.send(wire.Read, read)
	notify := le.AppendUint16(nil, 32)
	notify = le.AppendUint16(notify, 0)
	notify = le.AppendUint32(notify, 1000)
	notify = append(notify, dir[:]...)
	notify = le.AppendUint32(notify, filterFileName)
	notify = le.AppendUint32(notify, 0)
	mid := watcher.send(wire.ChangeNotify, notify)
	// The change is asked for once the CHANGE_NOTIFY has arrived: its
	// bytes acknowledged by the server's kernel, which stamped them. (Sent
	// is not arrived: on a busy machine the kernel may take another
	// connection's later segment first.)
	clustertest.Until(t, 10*time.Second, "the server's kernel to acknowledge the CHANGE_NOTIFY", func() bool {
		return unacknowledged(t, watcher.nc) == 0
	})

	other.create(`watched\after.txt`, fileCreate, optNonDirectory)
	for range maxIO {
		<-watcher.c.ioSlots
	}
	watcher.reply(readID)
	st, body := watcher.reply(mid)
	if st != wire.StatusSuccess {
		t.Fatalf("the CHANGE_NOTIFY answered %#x, not the change made after it arrived", st)
	}
	if got, want := notifyNames(t, body), []string{"1 after.txt"}; !slices.Equal(got, want) {
		t.Errorf("told %q, want %q", got, want)
	}
}

// notifyNames are the changes of a CHANGE_NOTIFY response's body, each
// "ACTION NAME".
func notifyNames(t *testing.T, body []byte) []string {
	t.Helper()
	le := binary.LittleEndian
	if len(body) < 8 {
		t.Fatalf("a CHANGE_NOTIFY response of %d bytes", len(body))
	}
	off, n := int(le.Uint16(body[2:]))-wire.HeaderSize, int(le.Uint32(body[4:]))
	if off < 8 || off+n > len(body) {
		t.Fatalf("a CHANGE_NOTIFY response's buffer out of its body")
	}
	b := body[off : off+n]
	var out []string
	for len(b) >= 12 {
		l := int(le.Uint32(b[8:]))
		if 12+l > len(b) {
			t.Fatalf("a FILE_NOTIFY_INFORMATION past its buffer")
		}
		name, err := wire.DecodeUTF16(b[12 : 12+l])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(rune('0'+le.Uint32(b[4:])))+" "+name)
		next := int(le.Uint32(b))
		if next == 0 || next > len(b) {
			break
		}
		b = b[next:]
	}
	return out
}

// unacknowledged is how many bytes written to the TCP connection nc its
// peer's kernel has not acknowledged yet (SIOCOUTQ).
func unacknowledged(t *testing.T, nc net.Conn) int {
	t.Helper()
	rc, err := nc.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var ierr error
	if err := rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.TIOCOUTQ) }); err != nil || ierr != nil {
		t.Fatalf("SIOCOUTQ: %v %v", err, ierr)
	}
	return n
}
