//go:build linux

package smb

import (
	"strings"
	"unicode/utf8"

	"plug/smb/internal/wire"
)

// maxPath caps the length of a path a client names.
const maxPath = 4096

// parseName turns the UTF-16 name of a CREATE (relative to the share,
// components separated by '\', a stream after a ':') into a path beneath
// the root and the name of a stream of it (see splitStream). It refuses
// what Windows refuses in a name, "." and ".." components (nothing leads
// up) and a leading '\'.
func parseName(raw []byte) (path, stream string, data bool, status uint32) {
	name, err := wire.DecodeUTF16(raw)
	if err != nil {
		return "", "", false, wire.StatusObjectNameInvalid
	}
	if name == "" {
		return "", "", false, wire.StatusSuccess
	}
	if name[0] == '\\' || name[0] == '/' {
		return "", "", false, wire.StatusInvalidParameter
	}
	name, stream, data, status = splitStream(name)
	if status != wire.StatusSuccess {
		return "", "", false, status
	}
	path, status = cleanPath(name)
	return path, stream, data, status
}

// cleanPath checks a path relative to the share root, its components
// separated by '\' (or '/', as Samba also takes); a ".." takes away the
// name before it, and one with none before it is refused.
func cleanPath(name string) (string, uint32) {
	if len(name) > maxPath {
		return "", wire.StatusObjectNameInvalid
	}
	// The default data stream is the file itself.
	if i := strings.IndexByte(name, ':'); i >= 0 {
		if !strings.EqualFold(name[i:], "::$DATA") {
			return "", wire.StatusObjectNameInvalid
		}
		name = name[:i]
	}
	name = strings.TrimSuffix(strings.ReplaceAll(name, "/", `\`), `\`)
	var parts []string
	for _, p := range strings.Split(name, `\`) {
		if p == ".." && len(parts) > 0 {
			// As Windows does: the name before it is taken away, so the
			// path never leads above the share.
			parts = parts[:len(parts)-1]
			continue
		}
		if st := validComponent(p); st != wire.StatusSuccess {
			return "", st
		}
		parts = append(parts, diskName(p))
	}
	return strings.Join(parts, "/"), wire.StatusSuccess
}

// validComponent checks one name of a path.
func validComponent(p string) uint32 {
	if p == ".." {
		return wire.StatusObjectPathSyntaxBad
	}
	if p == "" || p == "." || len(p) > 255 {
		return wire.StatusObjectNameInvalid
	}
	for _, r := range p {
		if r < 0x20 || strings.ContainsRune(`/\\:*?"<>|`, r) {
			return wire.StatusObjectNameInvalid
		}
	}
	return wire.StatusSuccess
}

// Names on disk that Windows cannot use, made in the pod, are shown to
// clients with each character Windows forbids replaced by one of Unicode's
// private use area, as macOS's SMB client and Samba's catia module map
// them (the "Services for Macintosh" table): the control characters
// U+0001-U+001F as U+F001-U+F01F, and " * : < > ? \ | as U+F020, U+F021,
// U+F022, U+F023, U+F024, U+F025, U+F026, U+F027. A byte that is not
// part of UTF-8 (0x80-0xFF) is shown as U+F280-U+F2FF. A client that names
// the file with those characters reaches the same name on disk, and a
// client that sends them (macOS does for ':') creates the name Linux
// programs expect. A name on disk that holds these private use characters
// itself is shown as it is, and opening it reaches the name they map to.
const (
	privateCtl  = 0xF000 // + 0x01..0x1F
	privateByte = 0xF200 // + 0x80..0xFF
	forbidden   = "\"*:<>?\\|"
)

// privateOf is the private use character a forbidden character other
// than a control character is shown as.
var privateOf = map[rune]rune{'"': 0xF020, '*': 0xF021, ':': 0xF022, '<': 0xF023, '>': 0xF024, '?': 0xF025, '\\': 0xF026, '|': 0xF027}

// wireName is the name a client is shown for the name disk on disk.
func wireName(disk string) string {
	if !needsMapping(disk) {
		return disk
	}
	var b strings.Builder
	for i := 0; i < len(disk); {
		r, n := utf8.DecodeRuneInString(disk[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			r = privateByte + rune(disk[i])
		case r < 0x20:
			r += privateCtl
		case privateOf[r] != 0:
			r = privateOf[r]
		}
		b.WriteRune(r)
		i += n
	}
	return b.String()
}

// needsMapping reports whether the name on disk has a character wireName
// replaces.
func needsMapping(disk string) bool {
	for _, c := range []byte(disk) {
		if c < 0x20 || strings.IndexByte(forbidden, c) >= 0 {
			return true
		}
	}
	return !utf8.ValidString(disk)
}

// diskName is the name on disk of name as a client gives it: wireName
// undone.
func diskName(name string) string {
	if !strings.ContainsFunc(name, func(r rune) bool { return r > privateCtl && r <= privateByte+0xFF }) {
		return name
	}
	var b []byte
	for _, r := range name {
		switch {
		case r > privateCtl && r < privateCtl+0x20:
			b = append(b, byte(r-privateCtl))
		case r >= privateByte+0x80 && r <= privateByte+0xFF:
			b = append(b, byte(r-privateByte))
		default:
			if c := forbiddenOf(r); c != 0 {
				b = append(b, c)
			} else {
				b = utf8.AppendRune(b, r)
			}
		}
	}
	return string(b)
}

// forbiddenOf is the forbidden character the private use character r
// stands for, 0 for none.
func forbiddenOf(r rune) byte {
	for c, p := range privateOf {
		if p == r {
			return byte(c)
		}
	}
	return 0
}

// wirePath is the '\'-separated path a client is shown for path on disk.
func wirePath(path string) string {
	parts := strings.Split(path, "/")
	for i, p := range parts {
		parts[i] = wireName(p)
	}
	return strings.Join(parts, `\`)
}
