//go:build linux

package smb

import (
	"encoding/binary"
	"strings"
	"unicode"

	"golang.org/x/sys/unix"

	"plug/smb/internal/wire"
)

// Directory information classes (MS-FSCC 2.4).
const (
	fileDirectoryInformation       = 1
	fileFullDirectoryInformation   = 2
	fileBothDirectoryInformation   = 3
	fileNamesInformation           = 12
	fileIDBothDirectoryInformation = 37
	fileIDFullDirectoryInformation = 38
	fileIDExtdDirectoryInformation = 60
)

// QUERY_DIRECTORY flags.
const (
	qdRestart      = 0x01
	qdSingle       = 0x02
	qdIndex        = 0x04
	qdReopen       = 0x10
	dirReadBufSize = 32 << 10
)

// dirScan is an enumeration under way on a directory open.
type dirScan struct {
	pattern  string
	names    []string // read from the directory, not yet returned
	dots     int      // "." and ".." returned so far
	eof      bool
	returned bool // an entry was returned since the scan began
	buf      []byte
}

// dirFixed is the size of an entry of class before its name.
func dirFixed(class uint8) int {
	switch class {
	case fileDirectoryInformation:
		return 64
	case fileFullDirectoryInformation:
		return 68
	case fileBothDirectoryInformation:
		return 94
	case fileNamesInformation:
		return 12
	case fileIDBothDirectoryInformation:
		return 104
	case fileIDFullDirectoryInformation:
		return 80
	case fileIDExtdDirectoryInformation:
		return 88
	}
	return 0
}

func (c *conn) queryDirectory(r *request) uint32 {
	b := r.body
	le := binary.LittleEndian
	class, flags := b[2], b[3]
	o, status := c.fileFor(r, b[8:24])
	if status != wire.StatusSuccess {
		return status
	}
	raw, err := wire.Field(r.msg, uint32(le.Uint16(b[24:])), uint32(le.Uint16(b[26:])), wire.HeaderSize+32)
	if err != nil {
		return wire.StatusInvalidParameter
	}
	limit := le.Uint32(b[28:])
	if limit > c.maxSize() || !c.chargeOK(r, limit) {
		return wire.StatusInvalidParameter
	}
	fixed := dirFixed(class)
	if fixed == 0 {
		return wire.StatusInvalidInfoClass
	}
	if !o.isDir {
		return wire.StatusInvalidParameter
	}
	if o.access&accReadData == 0 {
		return wire.StatusAccessDenied
	}
	pattern := "*"
	if len(raw) > 0 {
		if pattern, err = wire.DecodeUTF16(raw); err != nil || strings.ContainsAny(pattern, `\/`) {
			return wire.StatusObjectNameInvalid
		}
	}
	if int(limit) < fixed {
		return wire.StatusInfoLengthMismatch
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.scan == nil || flags&(qdRestart|qdReopen) != 0 {
		if _, err := unix.Seek(o.fd, 0, 0); err != nil {
			return wire.StatusAccessDenied
		}
		o.scan = &dirScan{pattern: pattern}
	}
	s := o.scan
	start := len(r.out)
	out := le.AppendUint16(r.out, 9)
	out = le.AppendUint16(out, wire.HeaderSize+8)
	out = le.AppendUint32(out, 0)
	data := len(out)
	prev := -1
	for {
		name, st, ok, status := c.nextEntry(o, s)
		if status != wire.StatusSuccess {
			r.out = out[:start]
			return status
		}
		if !ok {
			break
		}
		at := wire.Align8(len(out) - data)
		shown := wireName(name)
		need := at + fixed + wire.UTF16Len(shown)
		if need > int(limit) {
			s.names = append([]string{name}, s.names...)
			if prev < 0 {
				r.out = out[:start]
				return wire.StatusBufferOverflow
			}
			break
		}
		for len(out)-data < at {
			out = append(out, 0)
		}
		if prev >= 0 {
			le.PutUint32(out[data+prev:], uint32(at-prev))
		}
		prev = at
		out = appendDirEntry(out, class, shown, shortName(name), &st, c.attrs(name, &st))
		s.returned = true
		if flags&qdSingle != 0 {
			break
		}
	}
	if prev < 0 {
		r.out = out[:start]
		if !s.returned {
			return wire.StatusNoSuchFile
		}
		return wire.StatusNoMoreFiles
	}
	le.PutUint32(out[start+4:], uint32(len(out)-data))
	r.out = out
	return wire.StatusSuccess
}

// nextEntry is the next entry of the scan that matches its pattern and
// resolves beneath the root; ok is false at the end.
func (c *conn) nextEntry(o *open, s *dirScan) (string, fileStat, bool, uint32) {
	dirPath := o.node.path
	for {
		if s.dots < 2 {
			s.dots++
			name := "."
			p := dirPath
			if s.dots == 2 {
				name = ".."
				p, _ = splitPath(dirPath)
			}
			if !match(s.pattern, name) {
				continue
			}
			st, err := c.srv.root.statPath(p)
			if err != nil {
				continue
			}
			return name, st, true, wire.StatusSuccess
		}
		if len(s.names) == 0 {
			if s.eof {
				return "", fileStat{}, false, wire.StatusSuccess
			}
			if !hasWildcard(s.pattern) {
				// One name: look it up instead of reading the directory.
				s.eof = true
				if validComponent(s.pattern) == wire.StatusSuccess {
					if name := entryNamed(o.fd, diskName(s.pattern)); name != "" {
						s.names = []string{name}
					}
				}
				continue
			}
			if s.buf == nil {
				s.buf = make([]byte, dirReadBufSize)
			}
			n, err := unix.ReadDirent(o.fd, s.buf)
			if err != nil {
				return "", fileStat{}, false, ntStatus(err)
			}
			if n == 0 {
				s.eof = true
				s.buf = nil
				continue
			}
			_, _, s.names = unix.ParseDirent(s.buf[:n], -1, nil)
			continue
		}
		name := s.names[0]
		s.names = s.names[1:]
		if !match(s.pattern, wireName(name)) {
			continue
		}
		st, err := entryStat(o.fd, name)
		if err != nil {
			continue
		}
		link := st.mode&unix.S_IFMT == unix.S_IFLNK
		if link {
			// Shown as what it points to; when that is missing or outside
			// the root, as an empty file that can be deleted.
			p := name
			if dirPath != "" {
				p = dirPath + "/" + name
			}
			if to, err := c.srv.root.statPath(p); err == nil {
				st, link = to, false
			} else {
				st.size, st.alloc = 0, 0
			}
		}
		if !st.isDir() && !st.isReg() && !link {
			continue
		}
		return name, st, true, wire.StatusSuccess
	}
}

// appendDirEntry appends one entry of class (its NextEntryOffset zero),
// with short, its 8.3 name, where the class has one.
func appendDirEntry(b []byte, class uint8, name, short string, st *fileStat, attrs uint32) []byte {
	le := binary.LittleEndian
	b = le.AppendUint32(b, 0)
	b = le.AppendUint32(b, 0)
	nameLen := uint32(wire.UTF16Len(name))
	if class == fileNamesInformation {
		b = le.AppendUint32(b, nameLen)
		return wire.AppendUTF16(b, name)
	}
	b = appendTimes(b, st)
	b = le.AppendUint64(b, uint64(st.size))
	b = le.AppendUint64(b, uint64(st.alloc))
	b = le.AppendUint32(b, attrs)
	b = le.AppendUint32(b, nameLen)
	switch class {
	case fileFullDirectoryInformation:
		b = le.AppendUint32(b, 0)
	case fileIDFullDirectoryInformation:
		b = le.AppendUint32(b, 0)
		b = le.AppendUint32(b, 0)
		b = le.AppendUint64(b, st.ino)
	case fileBothDirectoryInformation:
		b = le.AppendUint32(b, 0)
		b = appendShortName(b, short)
	case fileIDBothDirectoryInformation:
		b = le.AppendUint32(b, 0)
		b = appendShortName(b, short)
		b = append(b, 0, 0)
		b = le.AppendUint64(b, st.ino)
	case fileIDExtdDirectoryInformation:
		b = le.AppendUint32(b, 0)
		b = le.AppendUint32(b, 0)
		b = le.AppendUint64(b, st.ino)
		b = le.AppendUint64(b, 0)
	}
	return wire.AppendUTF16(b, name)
}

// appendShortName appends the ShortNameLength, Reserved and ShortName
// (24 bytes) of a directory entry.
func appendShortName(b []byte, short string) []byte {
	n := wire.UTF16Len(short)
	b = append(b, byte(n), 0)
	b = wire.AppendUTF16(b, short)
	return append(b, make([]byte, 24-n)...)
}

func hasWildcard(p string) bool { return strings.ContainsAny(p, `*?<>"`) }

// match reports whether name matches the Windows wildcard pattern, case
// insensitively: '*' any run, '?' one character; the DOS forms '<', '>'
// and '"' are taken as '*', '?' and '.' that may also match nothing at
// the end of the name.
func match(pattern, name string) bool {
	if pattern == "*" || pattern == "*.*" {
		return true
	}
	p, n := []rune(pattern), []rune(name)
	// can[j] is true when p[:i] matches n[:j].
	can := make([]bool, len(n)+1)
	can[0] = true
	for i := 0; i < len(p); i++ {
		next := make([]bool, len(n)+1)
		switch p[i] {
		case '*', '<':
			seen := false
			for j := 0; j <= len(n); j++ {
				seen = seen || can[j]
				next[j] = seen
			}
		case '?':
			for j := 1; j <= len(n); j++ {
				next[j] = can[j-1]
			}
		case '>':
			for j := 0; j <= len(n); j++ {
				next[j] = j > 0 && can[j-1] || j == len(n) && can[j]
			}
		case '"':
			for j := 0; j <= len(n); j++ {
				next[j] = j > 0 && can[j-1] && n[j-1] == '.' || j == len(n) && can[j]
			}
		default:
			for j := 1; j <= len(n); j++ {
				next[j] = can[j-1] && foldEq(p[i], n[j-1])
			}
		}
		can = next
	}
	return can[len(n)]
}

func foldEq(a, b rune) bool {
	return a == b || unicode.ToUpper(a) == unicode.ToUpper(b)
}
