//go:build linux

package smb

import (
	"encoding/binary"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"plug/smb/internal/wire"
)

// Extended attributes (EAs) a client sets, at create (the ExtA context)
// or with FileFullEaInformation, live in user xattrs of the file named
// eaXattr followed by the EA's name in upper case (EA names are
// case-insensitive ASCII); the value is the EA's. An EA set with an empty
// value is removed. What a file may hold is what the file system lets its
// xattrs hold; where it keeps no user xattrs, EAs answer
// STATUS_EAS_NOT_SUPPORTED.
const eaXattr = "user.plug.ea."

// ea is one extended attribute.
type ea struct {
	name  string
	value []byte
}

// parseEAs decodes a FILE_FULL_EA_INFORMATION list (MS-FSCC 2.4.15).
func parseEAs(b []byte) ([]ea, uint32) {
	le := binary.LittleEndian
	var eas []ea
	for len(b) > 0 {
		if len(b) < 8 {
			return nil, wire.StatusInvalidParameter
		}
		next, nameLen, valueLen := le.Uint32(b), int(b[5]), int(le.Uint16(b[6:]))
		end := 8 + nameLen + 1 + valueLen
		if end > len(b) || next != 0 && (int(next) < end || int(next) > len(b)) || b[8+nameLen] != 0 {
			return nil, wire.StatusInvalidParameter
		}
		name := string(b[8 : 8+nameLen])
		if name == "" || len(name) > maxXattrName-len(eaXattr) || strings.ContainsAny(name, "\x00/\\:*?\"<>|,;=+[] ") || strings.IndexFunc(name, func(r rune) bool { return r >= 0x80 || r < 0x20 }) >= 0 {
			return nil, wire.StatusInvalidParameter
		}
		eas = append(eas, ea{strings.ToUpper(name), append([]byte(nil), b[9+nameLen:end]...)})
		if next == 0 {
			break
		}
		b = b[next:]
	}
	return eas, wire.StatusSuccess
}

// setEAs sets (or, with empty values, removes) eas on the file fd.
func setEAs(fd int, eas []ea) uint32 {
	p := procPath(fd)
	for _, e := range eas {
		var err error
		if len(e.value) == 0 {
			if err = unix.Removexattr(p, eaXattr+e.name); err == unix.ENODATA {
				err = nil
			}
		} else {
			err = unix.Setxattr(p, eaXattr+e.name, e.value, 0)
		}
		switch {
		case err == unix.ENOTSUP:
			return wire.StatusEASNotSupported
		case err == unix.E2BIG || err == unix.ERANGE:
			return wire.StatusDiskFull
		case err != nil:
			return ntStatus(err)
		}
	}
	return wire.StatusSuccess
}

// easOf is the EAs of the file fd, by name.
func easOf(fd int) []ea {
	p := procPath(fd)
	var eas []ea
	for _, n := range xattrNames(fd) {
		name, ok := strings.CutPrefix(n, eaXattr)
		if !ok || name == "" {
			continue
		}
		buf := make([]byte, 64<<10)
		if v, err := unix.Getxattr(p, n, buf); err == nil {
			eas = append(eas, ea{name, buf[:v]})
		}
	}
	sort.Slice(eas, func(i, j int) bool { return eas[i].name < eas[j].name })
	return eas
}

// appendEAs appends eas as a FILE_FULL_EA_INFORMATION list.
func appendEAs(b []byte, eas []ea) []byte {
	le := binary.LittleEndian
	start, prev := len(b), -1
	for _, e := range eas {
		for (len(b)-start)%4 != 0 {
			b = append(b, 0)
		}
		if prev >= 0 {
			le.PutUint32(b[prev:], uint32(len(b)-prev))
		}
		prev = len(b)
		b = le.AppendUint32(b, 0)
		b = append(b, 0, byte(len(e.name)))
		b = le.AppendUint16(b, uint16(len(e.value)))
		b = append(b, e.name...)
		b = append(b, 0)
		b = append(b, e.value...)
	}
	return b
}

// eaSize is FileEaInformation's EaSize of eas: what their list takes.
func eaSize(eas []ea) uint32 {
	if len(eas) == 0 {
		return 0
	}
	return uint32(len(appendEAs(nil, eas)))
}
