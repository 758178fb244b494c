//go:build linux

package smb

import (
	"hash/fnv"
	"strings"
)

// Every name has an 8.3 short name, as on an NTFS volume that makes them:
// a name that already is one (1-8 characters, a dot and 0-3 more, of the
// characters 8.3 names allow) in upper case; any other as Windows forms
// hashed ones: the first two allowed characters of its base, four hex
// digits of a hash of the whole name, "~1", and the first three allowed
// characters of its extension ("RE3F2A~1.TXT" for "readme first.txt").
// A short name is listed and told (FileAlternateNameInformation) and
// opens the file it stands for; of two names with the same short name,
// the first in byte order is the one it opens.

// shortChars are the characters an 8.3 name may hold besides letters and
// digits.
const shortChars = "$%'-_@~`!(){}^#&"

// shortName is the 8.3 name of the name on disk; "" for "." and "..".
func shortName(name string) string {
	if name == "." || name == ".." {
		return ""
	}
	base, ext := name, ""
	if i := strings.LastIndexByte(name, '.'); i > 0 {
		base, ext = name[:i], name[i+1:]
	}
	if b, e := shortPart(base, 8), shortPart(ext, 3); b != "" && len(b) == len(base) && len(e) == len(ext) {
		if e == "" && !strings.HasSuffix(name, ".") {
			return b
		}
		if e != "" {
			return b + "." + e
		}
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	const hex = "0123456789ABCDEF"
	sum := h.Sum32()
	short := shortPart(base, 2)
	for i := 0; i < 4; i++ {
		short += string(hex[sum>>(28-4*i)&0xF])
	}
	short += "~1"
	if e := shortPart(ext, 3); e != "" {
		short += "." + e
	}
	return short
}

// shortPart is s in upper case with the characters an 8.3 name may not
// hold left out, at most n of them.
func shortPart(s string, n int) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() == n {
			break
		}
		switch {
		case r >= 'a' && r <= 'z':
			b.WriteRune(r - 'a' + 'A')
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r < 0x80 && strings.ContainsRune(shortChars, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// mayBeShort reports whether name could be a hashed short name, which
// only a directory scan can find.
func mayBeShort(name string) bool {
	return len(name) <= 12 && strings.Contains(name, "~")
}
