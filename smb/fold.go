//go:build linux

package smb

import (
	"strings"

	"golang.org/x/sys/unix"
)

// Names are case-insensitive and case-preserving, as Windows and macOS
// clients expect: a name a client gives finds the entry on disk whose
// name equals it under Unicode simple case folding (strings.EqualFold),
// and a file created keeps the case it was given. The name as given is
// tried first, with one lookup; only when it does not exist is the
// directory read. Where the disk holds several entries that differ only
// in case (made there, not through the server), the one spelled exactly
// as given wins, else the first in byte order.

// fold is path with each component replaced by the name of the entry on
// disk it names case-insensitively; components with no such entry (and
// all after them) stay as given. Every lookup is beneath the root
// (openDir), so what fold returns is only ever resolved beneath it too.
func (r *rootFS) fold(path string) string {
	if path == "" {
		return path
	}
	fd, err := r.open(path, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err == nil {
		unix.Close(fd)
		return path
	}
	if err != unix.ENOENT && err != unix.ENOTDIR {
		return path
	}
	parts := strings.Split(path, "/")
	for i, name := range parts {
		dir := strings.Join(parts[:i], "/")
		dfd, err := r.openDir(dir)
		if err != nil {
			break
		}
		found := entryNamed(dfd, name)
		unix.Close(dfd)
		if found == "" {
			break
		}
		parts[i] = found
	}
	return strings.Join(parts, "/")
}

// entryNamed is the entry of the directory dirfd that name names: name
// itself when it exists, else the first in byte order of the entries
// equal to it under case folding, else of those whose 8.3 short name it
// is (see shortname.go), "" when there is none.
func entryNamed(dirfd int, name string) string {
	var st unix.Stat_t
	if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		return name
	}
	fd, err := reopen(dirfd, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return ""
	}
	defer unix.Close(fd)
	best, short := "", ""
	buf := make([]byte, dirReadBufSize)
	var names []string
	for {
		n, err := unix.ReadDirent(fd, buf)
		if err != nil || n == 0 {
			if best == "" {
				return short
			}
			return best
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names[:0])
		for _, e := range names {
			if (best == "" || e < best) && strings.EqualFold(e, name) {
				best = e
			}
			if mayBeShort(name) && (short == "" || e < short) && strings.EqualFold(shortName(e), name) {
				short = e
			}
		}
	}
}
