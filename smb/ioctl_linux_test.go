//go:build linux

package smb

import (
	"encoding/binary"
	"slices"
	"testing"

	"plug/smb/internal/wire"
)

// TestEnumerateSnapshots: asked for a file's previous versions
// (FSCTL_SRV_ENUMERATE_SNAPSHOTS, what Explorer's Previous Versions tab
// sends), the share answers that there are none, as MS-SMB2 has a server
// without any answer; an output buffer too small for the answer's fixed
// part is refused.
func TestEnumerateSnapshots(t *testing.T) {
	rc := dialRaw(t, rawServer(t))
	fid := rc.create("f.txt", fileCreate, optNonDirectory)
	enum := func(maxOut uint32) (uint32, []byte) {
		le := binary.LittleEndian
		b := le.AppendUint16(nil, 57)
		b = le.AppendUint16(b, 0)
		b = le.AppendUint32(b, fsctlEnumerateSnapshots)
		b = append(b, fid[:]...)
		b = append(b, make([]byte, 20)...) // no input, no output given
		b = le.AppendUint32(b, maxOut)
		b = le.AppendUint32(b, ioctlIsFSCTL)
		b = le.AppendUint32(b, 0)
		b = append(b, 0)
		return rc.reply(rc.send(wire.Ioctl, b))
	}
	st, body := enum(16)
	if st != wire.StatusSuccess || len(body) < 48 {
		t.Fatalf("FSCTL_SRV_ENUMERATE_SNAPSHOTS: status %#x", st)
	}
	le := binary.LittleEndian
	off, n := int(le.Uint32(body[32:]))-wire.HeaderSize, int(le.Uint32(body[36:]))
	if off < 0 || off+n > len(body) {
		t.Fatalf("the output (%d bytes at %d) is outside the response", n, off)
	}
	want := []byte{0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0}
	if out := body[off : off+n]; !slices.Equal(out, want) {
		t.Errorf("the previous versions: %x, want none (%x)", out, want)
	}
	if st, _ := enum(15); st != wire.StatusInvalidParameter {
		t.Errorf("with 15 bytes for the output: status %#x, want STATUS_INVALID_PARAMETER", st)
	}
}
