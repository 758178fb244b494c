//go:build linux

package smb

import (
	"strings"

	"plug/smb/internal/wire"
)

// maxPath caps the length of a path a client names.
const maxPath = 4096

// parseName turns the UTF-16 name of a CREATE (relative to the share,
// components separated by '\') into a path beneath the root. It refuses
// what Windows refuses in a name, "." and ".." components (nothing leads
// up), a leading '\' and names of streams other than the file's data.
func parseName(raw []byte) (string, uint32) {
	name, err := wire.DecodeUTF16(raw)
	if err != nil {
		return "", wire.StatusObjectNameInvalid
	}
	if name == "" {
		return "", wire.StatusSuccess
	}
	if name[0] == '\\' || name[0] == '/' {
		return "", wire.StatusInvalidParameter
	}
	return cleanPath(name)
}

// cleanPath checks a path relative to the share root, its components
// separated by '\' (or '/', as Samba also takes).
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
	parts := strings.Split(name, `\`)
	for _, p := range parts {
		if st := validComponent(p); st != wire.StatusSuccess {
			return "", st
		}
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
