//go:build linux

package smb

import (
	"encoding/binary"
	"slices"
	"testing"

	"plug/smb/internal/wire"
)

// TestQuotaFile: the NTFS quota file opens for reading, in any case, as
// Windows and Samba answer it (a hidden system directory without times),
// both in the CREATE response and when its handle is asked about itself;
// an open that asks to write it is refused, and its handle has no data
// and is not a directory that can be watched.
func TestQuotaFile(t *testing.T) {
	rc := dialRaw(t, rawServer(t))
	le := binary.LittleEndian
	const want = attrHidden | attrSystem | attrDirectory | attrArchive
	st, body := rc.open(`$EXTEND\$quota:$Q:$Index_Allocation`, accGenericRead, fileOpen, 0)
	if st != wire.StatusSuccess {
		t.Fatalf("opening the quota file: status %#x", st)
	}
	if a := le.Uint32(body[56:]); a != want {
		t.Errorf("the quota file's attributes are %#x, want %#x", a, want)
	}
	if !slices.Equal(body[8:40], make([]byte, 32)) {
		t.Errorf("the quota file's times are %x, want none", body[8:40])
	}
	fid := body[64:80]

	q := le.AppendUint16(nil, 41)
	q = append(q, infoFile, fileBasicInformation)
	q = le.AppendUint32(q, 40)
	q = append(q, make([]byte, 16)...) // no input, additional information or flags
	q = append(q, fid...)
	q = append(q, 0)
	st, body = rc.reply(rc.send(wire.QueryInfo, q))
	if st != wire.StatusSuccess || len(body) < 48 {
		t.Fatalf("FileBasicInformation of the quota file: status %#x", st)
	}
	if info := body[8:48]; !slices.Equal(info[:32], make([]byte, 32)) || le.Uint32(info[32:]) != want {
		t.Errorf("FileBasicInformation of the quota file: %x, want no times and attributes %#x", info, want)
	}

	n := le.AppendUint16(nil, 32)
	n = le.AppendUint16(n, 1) // the whole tree
	n = le.AppendUint32(n, 1000)
	n = append(n, fid...)
	n = le.AppendUint32(n, filterFileName)
	n = le.AppendUint32(n, 0)
	if st, _ := rc.reply(rc.send(wire.ChangeNotify, n)); st != wire.StatusInvalidParameter {
		t.Errorf("CHANGE_NOTIFY on the quota file: status %#x, want STATUS_INVALID_PARAMETER", st)
	}

	rd := le.AppendUint16(nil, 49)
	rd = append(rd, 0, 0)
	rd = le.AppendUint32(rd, 100)
	rd = le.AppendUint64(rd, 0)
	rd = append(rd, fid...)
	rd = append(rd, make([]byte, 17)...)
	if st, _ := rc.reply(rc.send(wire.Read, rd)); st != wire.StatusInvalidDeviceRequest {
		t.Errorf("READ of the quota file: status %#x, want STATUS_INVALID_DEVICE_REQUEST", st)
	}

	if st, _ := rc.open(quotaFileName, accGenericRead|accWriteData, fileOpen, 0); st != wire.StatusAccessDenied {
		t.Errorf("opening the quota file to write: status %#x, want STATUS_ACCESS_DENIED", st)
	}
}
